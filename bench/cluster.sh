#!/usr/bin/env bash
# bench/cluster: ZeRO-3 against each ZeRO++ optimization, all three (zeropp: with the hierarchical weight
# gather, zero_hierarchical_allgather; zeropp_flat: on the flat ring), and all three with LoCo's error feedback
# (zeropp_loco) or int8 gradients inside the node (zeropp_int8intra), on an emulated cluster of 2 nodes x 2
# ranks (scripts/cluster: network namespaces, real TCP through tc-shaped links), unshaped and at 10 Gb/s,
# 1 Gb/s and 200 Mb/s. GPT-2 124M, seq 64, micro-batch 1, fp16. For each run it prints one JSON line
#   {"config", "bandwidth", "tokens_per_s", "bytes_inter_node_per_step", "link_bytes_per_step", ...}
# where tokens/s is the mean over the steps after the first (warm-up) one, bytes_inter_node_per_step the
# meter's, and link_bytes_per_step what the node-side links' tc counters carried per step, with the bytes of a
# zero-step run of the same command subtracted; cpu_busy_share and cpu_system_share the machine's CPU time
# (all cores, /proc/stat) that was busy, and that went to the kernel (system, irq, softirq: TCP, tc, the
# namespaces), over the timed steps (from the warm-up step's metrics line to the last one).
# predicted_ms_per_step is gpt_train --plan's step for the same configuration, from rates bench/calibrate
# measured before any row: compute, host codecs and sending on an unshaped cluster, the links (bandwidth,
# latency) on each shaped one; the --plan line is printed per bandwidth and the calibrations are kept
# (--out FILE: FILE's name with _calibration.jsonl); ucx_rndv_thresh is the MPI transport's setting the row
# ran with (below). A table follows, then the planner's median and worst error over the rows; the cluster is
# torn down on every path.
#   bench/cluster.sh [--steps N] [--bandwidths "none 10gbit 1gbit 200mbit"] [--configs "..."] [--out FILE]
# Needs root with network namespaces (scripts/cluster probe); ~20-30 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=6  # one warm-up step, then at least 5 timed
bandwidths="none 10gbit 1gbit 200mbit"
configs="zero3 qwz hpz qgz zeropp zeropp_flat zeropp_loco zeropp_int8intra"
out=""
extra=()
while (($#)); do
  case $1 in
    --steps) steps=$2; shift 2 ;;
    --bandwidths) bandwidths=$2; shift 2 ;;
    --configs) configs=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "bench/cluster.sh: unknown option $1 (see the header of this file)" >&2; exit 2 ;;
  esac
done
source scripts/env.sh
# UCX's switch from eager messages to its rendezvous protocol (MPICH over UCX, TCP between the nodes), the same
# for every configuration and calibration. A rendezvous waits for a handshake whose packets queue behind up to
# 100 ms of the other rank's data in the shaped link (tbf, scripts/cluster), which each cross-node message of
# the hierarchical gather (a block's quantized shard, 1.8 MB here) paid at UCX's default. At 2 MB those go
# eager, and the larger messages (the spread inside the node, ZeRO-3's fp16 ring, 3.5 MB) keep their zero-copy
# rendezvous; every message eager (inf) costs CPU in copies. Measurements: docs/benchmarks.md.
export UCX_RNDV_THRESH=${UCX_RNDV_THRESH:-2mb}
echo "bench/cluster.sh: UCX_RNDV_THRESH=$UCX_RNDV_THRESH" >&2
bazel build //train:gpt_train //bench:calibrate >/dev/null 2>&1
train=$PWD/bazel-bin/train/gpt_train
calibrate=$PWD/bazel-bin/bench/calibrate
data=$GPT_DATA_DIR/shards/sotu_train.bin
[[ -f $data ]] || { echo "bench/cluster.sh: $data missing; run scripts/demo once (it prepares the shards)" >&2; exit 2; }
scripts/cluster probe >/dev/null || { echo "bench/cluster.sh: no privileges for the emulated cluster" >&2; exit 2; }

work=$(mktemp -d)
export GPT_CLUSTER_NAME=gptb
cleanup() { scripts/cluster down >/dev/null 2>&1 || true; rm -rf "$work"; }
trap cleanup EXIT INT TERM

json_for() {  # config -> DeepSpeed JSON
  local qwz=false hpz=1 qgz=false more=""
  case $1 in
    zero3) ;;
    qwz) qwz=true ;;
    hpz) hpz=2 ;;
    qgz) qgz=true ;;
    zeropp) qwz=true hpz=2 qgz=true more=', "zero_hierarchical_allgather": true' ;;
    zeropp_flat) qwz=true hpz=2 qgz=true ;;  # ZeRO++ with the forward gathers on the flat ring
    zeropp_loco) qwz=true hpz=2 qgz=true more=', "zeropp_loco_param": {"err_beta": 0.8, "reset_T": 1024}' ;;
    zeropp_int8intra) qwz=true hpz=2 qgz=true more=', "zeropp_intra_node_gradient_bits": 8' ;;
    *) echo "bench/cluster.sh: unknown configuration $1" >&2; exit 2 ;;
  esac
  printf '{"zero_optimization": {"stage": 3, "reduce_bucket_size": 10000000, "overlap_comm": true, "zero_quantized_weights": %s, "zero_hpz_partition_size": %s, "zero_quantized_gradients": %s%s}}\n' "$qwz" "$hpz" "$qgz" "$more"
}
link_sent() { scripts/cluster bytes | awk '$1 == "total" {print $2}'; }
cpu_times() { awk '$1 == "cpu" {print $2 + $3 + $4 + $6 + $7 + $8, $4 + $7 + $8, $2 + $3 + $4 + $5 + $6 + $7 + $8}' /proc/stat; }
cpu_shares() {  # "busy system total" before, after -> busy share, system share
  awk -v a="$1" -v b="$2" 'BEGIN {split(a, x, " "); split(b, y, " "); t = y[3] - x[3]; if (t <= 0) t = 1
    printf "%.3f %.3f", (y[1] - x[1]) / t, (y[2] - x[2]) / t}'
}
wait_for_steps() {  # FILE STEPS PID: returns once FILE has STEPS metrics lines with a loss, or PID has ended
  # Bash builtins only (bench/cpu_profile.sh takes this function too): a grep and a sleep forked every 50 ms
  # took 2.9 CPU seconds in 10 (15% of this 2-core machine, measured alone) from the ranks, which slowed the
  # CPU-bound rows (ZeRO++) more than the link-bound ones (ZeRO-3 at 1 Gb/s); this loop takes 0.1. read -t
  # on a pipe that nobody writes (opened once, read-write) sleeps without a fork.
  local n line pause
  exec {pause}<> <(:)
  while kill -0 "$3" 2>/dev/null; do
    n=0
    if [[ -f $1 ]]; then
      while IFS= read -r line; do [[ $line == *'"loss"'* ]] && n=$((n + 1)); done <"$1"
    fi
    ((n >= $2)) && break
    read -r -t 0.05 -u "$pause" || true
  done
  exec {pause}>&-
}
at_step() {  # STEP PID: /proc/stat's CPU times once the metrics file has STEP lines (or PID has ended)
  wait_for_steps "$work/m.jsonl" "$1" "$2"
  cpu_times
}
model=(--num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length 64 --micro-batch-size 1 --fp16)
calibrate_here() {  # -> the calibration's JSON line
  scripts/cluster run -- "$calibrate" --layers 12 --hidden 768 --heads 12 --seq 64 --batch 1 --threads 1 2>&1 |
    grep '^{"threads"'
}
plan_flags_of() { /usr/bin/python3 -c 'import json, sys; print(json.loads(sys.stdin.read())["plan_flags"])'; }
# The host rates of the unshaped calibration, the link rates of this bandwidth's.
plan_flags() {  # unshaped-calibration shaped-calibration
  /usr/bin/python3 - "$1" "$2" <<'PY'
import json, sys
host, link = (dict(zip(f.split()[::2], f.split()[1::2])) for f in (json.loads(a)["plan_flags"] for a in sys.argv[1:]))
for key in ("--intra-node-bandwidth", "--inter-node-bandwidth", "--link-latency-us"):
    host[key] = link[key]
print(" ".join(k + " " + v for k, v in host.items()))
PY
}
predicted_ms() {  # plan flags, JSON file -> the configured variant's predicted step in ms
  # shellcheck disable=SC2086
  "$train" --plan --nodes 2 --gpus-per-node 2 "${model[@]}" --deepspeed_config "$2" $1 | tail -1 |
    /usr/bin/python3 -c 'import json, sys
plan = json.loads(sys.stdin.read())["plan"]
print("%.0f" % (1e3 * next(v for v in plan["variants"] if v["configured"])["time_s"]["step"]))'
}
field() { { grep -o "\"$1\": *[^,}]*" || true; } | head -1 | sed 's/^[^:]*: *//; s/"//g'; }

results=${out:-$work/results.jsonl}
calibrations=${out:+${out%.jsonl}_calibration.jsonl}
calibrations=${calibrations:-$work/calibration.jsonl}
: >"$results"
: >"$calibrations"
scripts/cluster up --nodes 2 --ranks-per-node 2 --bandwidth none >/dev/null
unshaped=$(calibrate_here)
scripts/cluster down >/dev/null
for bandwidth in $bandwidths; do
  scripts/cluster up --nodes 2 --ranks-per-node 2 --bandwidth "$bandwidth" >/dev/null
  here=$unshaped
  [[ $bandwidth == none ]] || here=$(calibrate_here)
  sed "s/^{/{\"bandwidth\": \"$bandwidth\", /" <<<"$here" >>"$calibrations"
  flags=$(plan_flags "$unshaped" "$here")
  echo "plan at $bandwidth: gpt_train --plan --nodes 2 --gpus-per-node 2 ${model[*]} --deepspeed_config CONFIG $flags" >&2
  for config in $configs; do
    json_for "$config" >"$work/$config.json"
    predicted=$(predicted_ms "$flags" "$work/$config.json")
    cmd=("$train" "${model[@]}" --threads 1 --data-path "$data" --split 100,0,0
      --deepspeed_config "$work/$config.json" "${extra[@]}")
    before=$(link_sent)
    scripts/cluster run -- "${cmd[@]}" --train-iters 0 >"$work/zero.log" 2>&1
    baseline=$(($(link_sent) - before))
    before=$(link_sent)
    rm -f "$work/m.jsonl"
    scripts/cluster run -- "${cmd[@]}" --train-iters "$steps" --metrics-file "$work/m.jsonl" >"$work/run.log" 2>&1 &
    run_pid=$!
    # The machine's CPU over the timed steps: from the warm-up step's metrics line to the last one.
    cpu_before=$(at_step 1 "$run_pid") cpu_after=$(at_step "$steps" "$run_pid")
    wait "$run_pid" || { echo "bench/cluster.sh: $config at $bandwidth failed:" >&2; tail -3 "$work/run.log" >&2; continue; }
    read -r busy system <<<"$(cpu_shares "$cpu_before" "$cpu_after")"
    link=$(($(link_sent) - before - baseline))
    # Throughput and bytes from the steps after the warm-up step.
    grep '"loss"' "$work/m.jsonl" | tail -n +2 >"$work/timed.jsonl"
    n=$(wc -l <"$work/timed.jsonl")
    tps=$(while read -r l; do field tokens_per_s <<<"$l"; done <"$work/timed.jsonl" | awk '{s += $1} END {printf "%.2f", s / NR}')
    inter=$(while read -r l; do field bytes_inter_node <<<"$l"; done <"$work/m.jsonl" | awk '{s += $1} END {printf "%.0f", s / NR}')
    ms=$(while read -r l; do field ms <<<"$l"; done <"$work/timed.jsonl" | awk '{s += $1} END {printf "%.0f", s / NR}')
    printf '{"config": "%s", "bandwidth": "%s", "tokens_per_s": %s, "bytes_inter_node_per_step": %s, "link_bytes_per_step": %.0f, "ms_per_step": %s, "predicted_ms_per_step": %s, "timed_steps": %d, "cpu_busy_share": %s, "cpu_system_share": %s, "ucx_rndv_thresh": "%s"}\n' \
      "$config" "$bandwidth" "$tps" "$inter" "$(awk -v l="$link" -v s="$steps" 'BEGIN {print l / s}')" "$ms" \
      "$predicted" "$n" "$busy" "$system" "$UCX_RNDV_THRESH" |
      tee -a "$results"
  done
  scripts/cluster down >/dev/null
done

echo
printf "%-16s %-9s %9s %14s %9s %9s %9s %7s %9s %6s %6s\n" config bandwidth tokens/s "meter inter/st" "link/met" \
  "vs zero3" "ms/step" predicted "error" "zero3 ms" "sys"
while read -r line; do
  c=$(field config <<<"$line") b=$(field bandwidth <<<"$line") t=$(field tokens_per_s <<<"$line")
  m=$(field bytes_inter_node_per_step <<<"$line") l=$(field link_bytes_per_step <<<"$line")
  ms=$(field ms_per_step <<<"$line") p=$(field predicted_ms_per_step <<<"$line") s=$(field cpu_system_share <<<"$line")
  zero3=$(grep "\"config\": \"zero3\"" "$results" | grep "\"bandwidth\": \"$b\"" || true)
  z=$(field tokens_per_s <<<"$zero3") zms=$(field ms_per_step <<<"$zero3")
  printf "%-16s %-9s %9.1f %14.0f %9.3f %8.2fx %9s %9s %6.1f%% %9s %6s\n" "$c" "$b" "$t" "$m" \
    "$(awk -v a="$l" -v b="$m" 'BEGIN {print (b > 0 ? a / b : 0)}')" "$(awk -v a="$t" -v b="${z:-0}" 'BEGIN {print (b > 0 ? a / b : 0)}')" \
    "$ms" "$p" "$(awk -v a="$p" -v b="$ms" 'BEGIN {print (b > 0 ? 100 * (a - b) / b : 0)}')" "${zms:--}" "$s"
done <"$results"
# The planner against the measurement over all rows: median and worst absolute error.
/usr/bin/python3 - "$results" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
errors = sorted(abs(r["predicted_ms_per_step"] - r["ms_per_step"]) / r["ms_per_step"] for r in rows if r["ms_per_step"])
if errors:
    print("planner vs measured over %d rows: median absolute error %.1f%%, worst %.1f%%"
          % (len(errors), 100 * statistics.median(errors), 100 * errors[-1]))
PY
