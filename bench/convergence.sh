#!/usr/bin/env bash
# bench/convergence: does ZeRO++ train as well as ZeRO-3? bench/zeropp trains each configuration from the same
# initial weights on the same batches (so only the communication's numerics differ), at a constant learning
# rate and with warmup + cosine decay, once per seed. This script keeps every curve
# (OUT/<schedule>/seed<S>/<config>.json, bench/zeropp's --curves-dir), writes one line per schedule and
# configuration with the final validation loss of each seed, their mean and its ratio to zero3's mean
# (OUT/summary.jsonl), and draws each schedule's mean validation curves (OUT/<schedule>.png, gnuplot).
#   bench/convergence.sh [--steps 600] [--seeds "1 2 3"] [--schedules "constant cosine"]
#                        [--configs zero3,qwz,qgz,zeropp,zeropp_loco,zeropp_int8intra] [--out DIR]
#                        [--summary-only]
# --summary-only trains nothing: it summarizes and plots the curves already in DIR for the given schedules,
# seeds and configurations (after a run cut into pieces).
# The model and data of bench/results/README.md: GPT-2 with 4 layers, hidden 256, 8 heads, seq 128,
# micro-batch 4, 4 ranks as 2 simulated nodes x 2, fp16, dropout 0.1, SOTU (scripts/demo prepares the shards);
# validation every 50 steps. Constant: lr 1e-3; cosine: 30 warmup steps, 1e-3 -> 1e-4 over the run.
# Time: about 1 s per step on 2 cores (AVX-512), so the full set (2 schedules x 3 seeds x 6 configurations x
# 600 steps) takes about 6 hours there; a run can be cut into pieces with --seeds, --schedules and --configs
# into one --out (each invocation summarizes the schedules, seeds and configurations it was given).
set -euo pipefail
cd "$(dirname "$0")/.."
steps=600
seeds="1 2 3"
schedules="constant cosine"
configs=zero3,qwz,qgz,zeropp,zeropp_loco,zeropp_int8intra
out=bench/results/convergence
train=true
while (($#)); do
  case $1 in
    --steps) steps=$2; shift 2 ;;
    --seeds) seeds=$2; shift 2 ;;
    --schedules) schedules=$2; shift 2 ;;
    --configs) configs=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --summary-only) train=false; shift ;;
    *) echo "bench/convergence.sh: unknown option $1 (see the header of this file)" >&2; exit 2 ;;
  esac
done
source scripts/env.sh
command -v gnuplot >/dev/null || { echo "bench/convergence.sh: gnuplot is missing; run scripts/setup" >&2; exit 2; }
if $train; then
  bazel build //bench:zeropp >/dev/null 2>&1
  # The binary itself, not the bazel-bin link: a build of another configuration (--config=tsan) during the
  # hours this runs would point the link elsewhere.
  bench=$(readlink -f bazel-bin/bench/zeropp)
  data=$GPT_DATA_DIR/shards
  [[ -f $data/sotu_train.bin && -f $data/sotu_val.bin ]] ||
    { echo "bench/convergence.sh: SOTU shards missing in $data; run scripts/demo once (it prepares them)" >&2; exit 2; }
fi

schedule_flags() {
  case $1 in
    constant) echo "--lr 1e-3" ;;
    cosine) echo "--lr 1e-3 --min-lr 1e-4 --lr-decay-style cosine --lr-warmup-iters 30" ;;
    *) echo "bench/convergence.sh: unknown schedule $1 (constant or cosine)" >&2; exit 2 ;;
  esac
}

for schedule in $schedules; do
  for seed in $seeds; do
    $train || continue
    dir=$out/$schedule/seed$seed
    mkdir -p "$dir"
    # shellcheck disable=SC2046  # the schedule's flags are words
    mpiexec -n 4 "$bench" --num-layers 4 --hidden-size 256 --num-attention-heads 8 --seq-length 128 \
      --micro-batch-size 4 --fp16 --ranks-per-node 2 --threads 1 --seed "$seed" $(schedule_flags "$schedule") \
      --train-iters "$steps" --data-path "$data/sotu_train.bin" --valid-data-path "$data/sotu_val.bin" \
      --steps "$steps" --eval-interval 50 --eval-iters 10 --configs "$configs" --curves-dir "$dir" |
      tee "$dir/lines.jsonl"
  done
done

# The (step, validation loss) pairs of one curve file, one per line.
val_points() { awk '/"step":/ {gsub(/[^0-9]/, "", $2); step = $2} /"val_loss":/ {gsub(/,/, "", $2); print step, $2}' "$1"; }

summary=$out/summary.jsonl
mkdir -p "$out"
: >"$summary"
for schedule in $schedules; do
  plot_cmd=""
  zero3_mean=""
  for config in ${configs//,/ }; do
    finals=() curves=()
    for seed in $seeds; do
      file=$out/$schedule/seed$seed/$config.json
      [[ -f $file ]] || continue
      curves+=("$file")
      finals+=("$(val_points "$file" | tail -1 | cut -d' ' -f2)")
    done
    ((${#finals[@]})) || continue
    mean=$(printf '%s\n' "${finals[@]}" | awk '{s += $1} END {printf "%.6f", s / NR}')
    [[ $config == zero3 ]] && zero3_mean=$mean
    ratio=$([[ -n $zero3_mean ]] && awk -v m="$mean" -v z="$zero3_mean" 'BEGIN {printf "%.5f", m / z}' || echo null)
    printf '{"schedule": "%s", "config": "%s", "steps": %s, "seeds": %d, "final_val_losses": [%s], "mean_val_loss": %s, "vs_zero3": %s}\n' \
      "$schedule" "$config" "$steps" "${#finals[@]}" "$(IFS=,; echo "${finals[*]}")" "$mean" "$ratio" | tee -a "$summary"
    # The mean validation curve over the seeds, for the plot.
    for file in "${curves[@]}"; do val_points "$file"; done |
      awk '{s[$1] += $2; n[$1]++} END {for (k in s) print k, s[k] / n[k]}' | sort -n >"$out/$schedule.$config.tsv"
    plot_cmd+="${plot_cmd:+, }'$out/$schedule.$config.tsv' using 1:2 with linespoints title '$config'"
  done
  [[ -n $plot_cmd ]] || continue
  gnuplot <<GNUPLOT
set terminal pngcairo size 900,560 noenhanced
set output '$out/$schedule.png'
set title 'Validation loss, mean over seeds ($schedule learning rate)'
set xlabel 'step'
set ylabel 'validation loss'
set key top right
plot $plot_cmd
GNUPLOT
  rm -f "$out/$schedule".*.tsv
done
echo "bench/convergence.sh: $summary and $out/*.png"
