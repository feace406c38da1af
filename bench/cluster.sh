#!/usr/bin/env bash
# bench/cluster: ZeRO-3 against each ZeRO++ optimization, all three (zeropp: with the hierarchical weight
# gather, zero_hierarchical_allgather; zeropp_flat: on the flat ring), and all three with LoCo's error feedback
# (zeropp_loco) or int8 gradients inside the node (zeropp_int8intra), on an emulated cluster of 2 nodes x 2
# ranks (scripts/cluster: network namespaces, real TCP through tc-shaped links), unshaped and at 10 Gb/s,
# 1 Gb/s and 200 Mb/s. GPT-2 124M, seq 64, micro-batch 1, fp16. For each run it prints one JSON line
#   {"config", "bandwidth", "tokens_per_s", "bytes_inter_node_per_step", "link_bytes_per_step", ...}
# where tokens/s is the mean over the steps after the first (warm-up) one, bytes_inter_node_per_step the
# meter's, and link_bytes_per_step what the node-side links' tc counters carried per step, with the bytes of a
# zero-step run of the same command subtracted. A table follows; the cluster is torn down on every path.
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
bazel build //train:gpt_train >/dev/null 2>&1
train=$PWD/bazel-bin/train/gpt_train
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
field() { { grep -o "\"$1\": *[^,}]*" || true; } | head -1 | sed 's/^[^:]*: *//; s/"//g'; }

results=${out:-$work/results.jsonl}
: >"$results"
for bandwidth in $bandwidths; do
  scripts/cluster up --nodes 2 --ranks-per-node 2 --bandwidth "$bandwidth" >/dev/null
  for config in $configs; do
    json_for "$config" >"$work/$config.json"
    cmd=("$train" --num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length 64 --micro-batch-size 1
      --fp16 --threads 1 --data-path "$data" --split 100,0,0 --deepspeed_config "$work/$config.json" "${extra[@]}")
    before=$(link_sent)
    scripts/cluster run -- "${cmd[@]}" --train-iters 0 >"$work/zero.log" 2>&1
    baseline=$(($(link_sent) - before))
    before=$(link_sent)
    scripts/cluster run -- "${cmd[@]}" --train-iters "$steps" --metrics-file "$work/m.jsonl" >"$work/run.log" 2>&1 ||
      { echo "bench/cluster.sh: $config at $bandwidth failed:" >&2; tail -3 "$work/run.log" >&2; continue; }
    link=$(($(link_sent) - before - baseline))
    # Throughput and bytes from the steps after the warm-up step.
    grep '"loss"' "$work/m.jsonl" | tail -n +2 >"$work/timed.jsonl"
    n=$(wc -l <"$work/timed.jsonl")
    tps=$(while read -r l; do field tokens_per_s <<<"$l"; done <"$work/timed.jsonl" | awk '{s += $1} END {printf "%.2f", s / NR}')
    inter=$(while read -r l; do field bytes_inter_node <<<"$l"; done <"$work/m.jsonl" | awk '{s += $1} END {printf "%.0f", s / NR}')
    ms=$(while read -r l; do field ms <<<"$l"; done <"$work/timed.jsonl" | awk '{s += $1} END {printf "%.0f", s / NR}')
    printf '{"config": "%s", "bandwidth": "%s", "tokens_per_s": %s, "bytes_inter_node_per_step": %s, "link_bytes_per_step": %.0f, "ms_per_step": %s, "timed_steps": %d}\n' \
      "$config" "$bandwidth" "$tps" "$inter" "$(awk -v l="$link" -v s="$steps" 'BEGIN {print l / s}')" "$ms" "$n" |
      tee -a "$results"
  done
  scripts/cluster down >/dev/null
done

echo
printf "%-8s %-9s %12s %14s %14s %8s %10s\n" config bandwidth tokens/s "meter inter/st" "link bytes/st" "link/met" "vs zero3"
while read -r line; do
  c=$(field config <<<"$line") b=$(field bandwidth <<<"$line") t=$(field tokens_per_s <<<"$line")
  m=$(field bytes_inter_node_per_step <<<"$line") l=$(field link_bytes_per_step <<<"$line")
  z=$(grep "\"config\": \"zero3\"" "$results" | grep "\"bandwidth\": \"$b\"" | field tokens_per_s || echo 0)
  printf "%-8s %-9s %12.1f %14.0f %14.0f %8.3f %9.2fx\n" "$c" "$b" "$t" "$m" "$l" \
    "$(awk -v a="$l" -v b="$m" 'BEGIN {print (b > 0 ? a / b : 0)}')" "$(awk -v a="$t" -v b="$z" 'BEGIN {print (b > 0 ? a / b : 0)}')"
done <"$results"
