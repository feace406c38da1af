#!/usr/bin/env bash
# bench/cpu_profile: where the CPU time of a ZeRO step goes on the emulated cluster (2 nodes x 2 ranks, GPT-2
# 124M, seq 64, micro-batch 1, fp16, the configurations of bench/cluster.sh). It samples every CPU of the
# machine with `perf record -a -g` from the end of gpt_train's first step to the end of its last (perf's
# control FIFO, switched when the metrics file gains those lines), sorts the ranks' samples into the
# categories below by the first frame (from the leaf) that names one, and prints CPU seconds per step and
# shares of the ranks' time, user and kernel alike. Start-up, the first step and MPI_Finalize are outside.
#   bench/cpu_profile.sh [--config zeropp] [--bandwidth none] [--steps 4] [--json FILE]
# Needs root (network namespaces, perf over every CPU); about 3 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
config=zeropp bandwidth=none steps=4 json=""
while (($#)); do
  case $1 in
    --config) config=$2; shift 2 ;;
    --bandwidth) bandwidth=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --json) json=$2; shift 2 ;;
    *) echo "bench/cpu_profile.sh: unknown option $1 (see the header of this file)" >&2; exit 2 ;;
  esac
done
command -v perf >/dev/null || { echo "bench/cpu_profile.sh: perf is missing (apt install linux-perf)" >&2; exit 2; }
source scripts/env.sh
bazel build //train:gpt_train >/dev/null 2>&1
data=$GPT_DATA_DIR/shards/sotu_train.bin
[[ -f $data ]] || { echo "bench/cpu_profile.sh: $data missing; run scripts/demo once" >&2; exit 2; }
work=$(mktemp -d)
export GPT_CLUSTER_NAME=gptp
cleanup() { scripts/cluster down >/dev/null 2>&1 || true; rm -rf "$work"; }
trap cleanup EXIT INT TERM
# bench/cluster.sh's JSON for the configuration, and its fork-free wait for metrics lines.
source <(sed -n '/^json_for() {/,/^}/p; /^wait_for_steps() {/,/^}/p' bench/cluster.sh)
json_for "$config" >"$work/config.json"
scripts/cluster up --nodes 2 --ranks-per-node 2 --bandwidth "$bandwidth" >/dev/null
frequency=499
mkfifo "$work/ctl" "$work/ack"
perf record -a -g -F $frequency -D -1 --control "fifo:$work/ctl,$work/ack" -o "$work/perf.data" \
  >/dev/null 2>&1 &
perf_pid=$!
exec 3>"$work/ctl" 4<"$work/ack"
perf_control() {  # enable | disable
  echo "$1" >&3
  read -r -t 10 _ <&4 || true
}
scripts/cluster run -- "$PWD/bazel-bin/train/gpt_train" --num-layers 12 --hidden-size 768 \
  --num-attention-heads 12 --seq-length 64 --micro-batch-size 1 --fp16 --threads 1 --data-path "$data" \
  --split 100,0,0 --deepspeed_config "$work/config.json" --train-iters $((1 + steps)) \
  --metrics-file "$work/m.jsonl" >"$work/run.log" 2>&1 &
train_pid=$!
wait_for_steps "$work/m.jsonl" 1 "$train_pid"
perf_control enable
wait_for_steps "$work/m.jsonl" $((1 + steps)) "$train_pid"
perf_control disable
wait "$train_pid" || { echo "bench/cpu_profile.sh: gpt_train failed:" >&2; tail -3 "$work/run.log" >&2; exit 1; }
kill -INT "$perf_pid"
wait "$perf_pid" || true
perf script -i "$work/perf.data" --comm gpt_train -F tid,ip,sym 2>/dev/null >"$work/stacks"
ms=$(grep '"loss"' "$work/m.jsonl" | tail -n "$steps" | grep -o '"ms": *[0-9.]*' | awk -F: '{s += $2} END {printf "%.0f", s / NR}')
/usr/bin/python3 - "$work/stacks" "$steps" "$frequency" "$config" "$bandwidth" "$json" "$ms" <<'PY'
import collections, json, re, sys
# First match from the leaf wins; the order settles frames that name two (a memset inside an allocation).
CATEGORIES = [
    ("MPI progress: polling (epoll_wait)", ["epoll_wait", "ucs_event_set_wait"]),
    ("kernel TCP send", ["tcp_sendmsg", "sendmsg", "writev"]),
    ("kernel TCP receive", ["tcp_recvmsg", "recvmsg", "readv"]),
    ("fresh memory (page faults, clearing, unmapping)", ["page_fault", "handle_mm_fault", "munmap", "unmap_",
                                                         "free_pages", "folio", "clear_page"]),
    ("GEMMs", ["gebp", "gemm", "linear_forward", "linear_backward"]),
    ("layer kernels (attention, LayerNorm, GELU, loss)", ["attention", "layernorm", "gelu", "cross_entropy",
                                                          "softmax", "residual", "embedding", "dropout"]),
    ("dequantize (qwZ, qgZ)", ["dequantize"]),  # before quantize: "dequantize_all" names both
    ("quantize (qwZ, qgZ)", ["quantize_block", "quantize_slice", "quantize_all", "CpuOps::quantize"]),
    ("casts, copies and sums (decode, pack, reduce)", ["CpuOps::cast", "f32_to_f16", "round_to_f16", "f16_to",
                                                        "add_to_wire", "add_final", "widen", "add_into",
                                                        "CpuOps::copy", "divide"]),
    ("optimizer (AdamW, norm, finiteness)", ["adamw", "sum_of_squares", "all_finite"]),
    ("zero-fill and memcpy", ["memset", "memcpy", "memmove"]),
    ("MPI progress: other", ["ucp_", "uct_", "ucs_", "MPI_", "MPIR_", "MPID", "libmpich", "Engine::progress"]),
    ("scheduler, futex, sleep", ["schedule", "futex", "pthread_cond", "sched_yield", "nanosleep"]),
]

def counts(path):
    c, frames = collections.Counter(), None
    def close():
        if frames is None: return
        for frame in frames:
            for name, keys in CATEGORIES:
                if any(k in frame for k in keys):
                    c[name] += 1
                    return
        c["other"] += 1
    for line in open(path):
        if re.match(r"^\s*\d+\s*$", line):
            close(); frames = []
        elif line.strip() and frames is not None:
            frames.append(line.strip().split(None, 1)[-1])
    close()
    return c

samples = counts(sys.argv[1])
steps, frequency, config, bandwidth, json_path, ms = (int(sys.argv[2]), float(sys.argv[3]), sys.argv[4],
                                                      sys.argv[5], sys.argv[6], float(sys.argv[7]))
total = sum(samples.values()) or 1
cpu_s = total / frequency / steps
print("bench/cpu_profile: %s at %s, %d steps of %.0f ms: the ranks' CPU per step by category (%.2f s, %.2f"
      " cores busy)" % (config, bandwidth, steps, ms, cpu_s, cpu_s / (ms / 1e3)))
for name, n in samples.most_common():
    print("  %-52s %7.3f s  %5.1f%%" % (name, n / frequency / steps, 100.0 * n / total))
if json_path:
    with open(json_path, "a") as out:
        out.write(json.dumps({"config": config, "bandwidth": bandwidth, "steps": steps, "ms_per_step": ms,
                              "cpu_s_per_step": round(cpu_s, 3),
                              "shares": {k: round(v / total, 4) for k, v in samples.most_common()}}) + "\n")
PY
