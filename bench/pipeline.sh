#!/usr/bin/env bash
# bench/pipeline: pipeline parallelism's step time and bubble (issue 34) on this machine. A GPT-2 of 8 layers,
# width 256, 4 heads, 128 tokens, a vocabulary of 1024 (its head costs about 0.3 of a layer, so an even split
# of 4 + 4 layers is within 7% of balanced), fp32, dropout 0.1, micro-batch 1, one thread per rank: p = 1 on one
# rank, p = 2 on two, so each stage has its own core, with 1F1B and with the interleaved schedule (v = 2 chunks
# a stage), over m = 2, 4, 8, 16 micro-batches per step (the global batch). Per m and schedule: the median step
# of each, the speedup, and the ideal for the split (gpt_train's banner: FLOP balance x (1 - bubble)); each
# stage's bubble, measured from its own compute time against the time its micro-batches took (gpt_train's
# metrics: stage_busy_ms, stage_pipeline_ms), beside the formula (p - 1) / (v m + p - 1), which holds for
# balanced stages: the busiest stage's is the one to judge, the other's adds the imbalance. One JSON line per
# m and schedule in --out (default bench/results/pipeline.jsonl), a summary, and a plot beside it (.png).
#   bench/pipeline.sh [--steps 10] [--out FILE] [--layers 8] [--split "FLAGS"]
# --steps: steps per run, the first two not timed. --split: Megatron's split flags for p = 2 (for example
# "--decoder-first-pipeline-num-layers 5"). About 5 minutes on 2 idle cores. With 6 steps (4 timed) one run
# on this machine fell to 0.85 of the ideal at m = 16 where 10 steps gave 0.97: keep 10 or more.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=10
out=bench/results/pipeline.jsonl
layers=8
split=""
while (($#)); do
  case $1 in
    --steps) steps=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --layers) layers=$2; shift 2 ;;
    --split) split=$2; shift 2 ;;
    *) echo "bench/pipeline.sh: unknown option $1 (see the header of this file)" >&2; exit 2 ;;
  esac
done
((steps >= 3)) || { echo "bench/pipeline.sh: --steps must be at least 3 (two are not timed)" >&2; exit 2; }
source scripts/env.sh
command -v gnuplot >/dev/null || { echo "bench/pipeline.sh: gnuplot is missing; run scripts/setup" >&2; exit 2; }
bazel build -c opt //train:gpt_train >/dev/null 2>&1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
scripts/random_shard "$tmp/data.bin" 400000 1024
model=(--num-layers "$layers" --hidden-size 256 --num-attention-heads 4 --seq-length 128 --vocab-size 1024
  --micro-batch-size 1 --lr 1e-3 --seed 7 --threads 1 --train-iters "$steps" --eval-interval 1000000
  --data-path "$tmp/data.bin")
: >"$out"
for m in 2 4 8 16; do
  echo "bench/pipeline: m = $m, p = 1" >&2
  bazel-bin/train/gpt_train "${model[@]}" --global-batch-size "$m" --metrics-file "$tmp/p1_$m.jsonl" \
    >"$tmp/p1_$m.log" 2>&1 || { tail -3 "$tmp/p1_$m.log"; exit 1; }
  for v in 1 2; do
    # shellcheck disable=SC2206 # --split's flags are meant to split
    flags=($split)
    ((v > 1)) && flags=(--num-layers-per-virtual-pipeline-stage $((layers / 2 / v)))
    echo "bench/pipeline: m = $m, p = 2, v = $v ${flags[*]}" >&2
    mpiexec -n 2 bazel-bin/train/gpt_train "${model[@]}" --global-batch-size "$m" \
      --pipeline-model-parallel-size 2 "${flags[@]}" --metrics-file "$tmp/p2_${m}_$v.jsonl" \
      >"$tmp/p2_${m}_$v.log" 2>&1 || { tail -3 "$tmp/p2_${m}_$v.log"; exit 1; }
    python3 - "$tmp/p1_$m.jsonl" "$tmp/p2_${m}_$v.jsonl" "$tmp/p2_${m}_$v.log" "$m" "$layers" "${flags[*]}" "$v" \
      >>"$out" <<'PY'
import json, re, statistics, sys
p1_path, p2_path, log, m, layers, flags, v = sys.argv[1:8]
m, v = int(m), int(v)
def timed(path):
    return [r for r in map(json.loads, open(path)) if "grad_norm" in r][2:]
p1, p2 = timed(p1_path), timed(p2_path)
ms1, ms2 = statistics.median(r["ms"] for r in p1), statistics.median(r["ms"] for r in p2)
banner = open(log).read()
ideal = float(re.search(r"ideal speedup ([0-9.]+)x", banner).group(1))
balance = float(re.search(r"FLOP balance ([0-9.]+)", banner).group(1))
stages = re.search(r"stage 0 .*?; ideal", banner).group(0).rsplit(";", 1)[0]
bubbles = [statistics.median(1 - r["stage_busy_ms"][s] / r["stage_pipeline_ms"][s] for r in p2) for s in range(2)]
busiest = max(range(2), key=lambda s: statistics.median(r["stage_busy_ms"][s] for r in p2))
formula = 1 / (v * m + 1)
print(json.dumps({"model": f"{layers} layers x 256, 4 heads, T 128, V 1024, fp32, micro-batch 1",
                  "schedule": "1F1B" if v == 1 else "interleaved", "v": v, "flags": flags or "even split",
                  "stages": stages, "m": m, "p": 2, "ms_p1": round(ms1, 1), "ms_p2": round(ms2, 1),
                  "speedup": round(ms1 / ms2, 3), "ideal_speedup": ideal, "flop_balance": balance,
                  "speedup_of_ideal": round(ms1 / ms2 / ideal, 3),
                  "bubble_by_stage": [round(b, 4) for b in bubbles], "busiest_stage": busiest,
                  "bubble_formula": round(formula, 4), "bubble_error": round(bubbles[busiest] / formula - 1, 3)}))
PY
  done
done
python3 - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("bench/pipeline:", rows[0]["model"], "| p = 2")
for r in rows:
    if r["m"] == rows[0]["m"]: print(f"  {r['schedule']}: {r['stages']}")
print("  m  schedule      p=1 ms   p=2 ms   speedup   ideal   of ideal   bubble busiest (other)   formula   error")
for r in rows:
    other = r["bubble_by_stage"][1 - r["busiest_stage"]]
    print(f"{r['m']:3d}  {r['schedule']:12s} {r['ms_p1']:8.1f} {r['ms_p2']:8.1f} {r['speedup']:8.2f}x "
          f"{r['ideal_speedup']:6.2f}x {r['speedup_of_ideal']:9.3f}   "
          f"{r['bubble_by_stage'][r['busiest_stage']]:8.3f} ({other:.3f}){r['bubble_formula']:17.3f} "
          f"{r['bubble_error']:+7.1%}")
PY
python3 - "$out" "$tmp" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for v in (1, 2):
    with open(f"{sys.argv[2]}/v{v}.tsv", "w") as f:
        for r in rows:
            if r["v"] == v:
                print(r["m"], r["speedup"], r["ideal_speedup"], r["bubble_by_stage"][r["busiest_stage"]],
                      r["bubble_formula"], file=f)
PY
gnuplot <<GP
set terminal pngcairo size 1000,420
set output "${out%.jsonl}.png"
set multiplot layout 1,2 title "bench/pipeline: p = 2 against p = 1, one core per stage"
set logscale x 2
set xlabel "micro-batches per step (m)"
set key top left
set ylabel "speedup over p = 1"
plot "$tmp/v1.tsv" using 1:2 with linespoints title "1F1B", "" using 1:3 with lines dashtype 2 title "1F1B ideal", \
  "$tmp/v2.tsv" using 1:2 with linespoints title "interleaved (v = 2)", "" using 1:3 with lines dashtype 2 title "interleaved ideal"
set ylabel "bubble of the busiest stage"
set key top right
plot "$tmp/v1.tsv" using 1:4 with linespoints title "1F1B", "" using 1:5 with lines dashtype 2 title "(p-1)/(m+p-1)", \
  "$tmp/v2.tsv" using 1:4 with linespoints title "interleaved", "" using 1:5 with lines dashtype 2 title "(p-1)/(vm+p-1)"
unset multiplot
GP
echo "bench/pipeline: wrote $out and ${out%.jsonl}.png" >&2
