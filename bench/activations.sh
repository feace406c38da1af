#!/usr/bin/env bash
# bench/activations: tensor and sequence parallelism with selective recomputation (issue 14) on this machine.
# GPT-2 124M at seq 1024, micro-batch 1, dropout 0.1, fp32: for t = 1, 2, 4 (one process per tensor-parallel
# rank under mpiexec; at t = 2 and 4 without and with sequence parallelism) and for no, selective and full
# recomputation, the activation bytes per rank the arena holds, the restated formula (what the loop stores,
# train/activation_formulas.h), the paper's formula, and the median forward+backward step. Then the ratios the
# issue asks for, a summary line, and a plot (results in bench/results/activations.jsonl and .png).
#   bench/activations.sh [--steps 5] [--steps-tp 3] [--warmup 1] [--out FILE] [--shape "FLAGS"]
# --steps: timed steps per granularity at t = 1 (where selective's time over none's is judged); --steps-tp at
# t = 2 and 4. The granularities take turns in every round, so each time ratio comes from one run. About 25
# minutes on 2 idle cores: t = 1 uses both (--threads 2); t = 2 and 4 run one thread per rank, so t = 4
# oversubscribes the 2 cores. --shape passes other model flags (a quick try: --shape "--layers 2 --hidden 64
# --heads 4 --seq 32 --vocab-size 200").
set -euo pipefail
cd "$(dirname "$0")/.."
steps=5
steps_tp=3
warmup=1
out=bench/results/activations.jsonl
shape=""
while (($#)); do
  case $1 in
    --steps) steps=$2; shift 2 ;;
    --steps-tp) steps_tp=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --shape) shape=$2; shift 2 ;;
    *) echo "bench/activations.sh: unknown option $1 (see the header of this file)" >&2; exit 2 ;;
  esac
done
source scripts/env.sh
command -v gnuplot >/dev/null || { echo "bench/activations.sh: gnuplot is missing; run scripts/setup" >&2; exit 2; }
bazel build -c opt //bench:activations >/dev/null 2>&1
: >"$out"
run() {  # $1: t, then the bench's flags
  local t=$1
  shift
  echo "bench/activations: t = $t $*" >&2
  # shellcheck disable=SC2086 # --shape's flags are meant to split
  mpiexec -n "$t" bazel-bin/bench/activations --warmup "$warmup" $shape "$@" >>"$out"
}
run 1 --threads 2 --steps "$steps"
for t in 2 4; do
  run "$t" --threads 1 --steps "$steps_tp"
  run "$t" --threads 1 --steps "$steps_tp" --sequence-parallel
done

# The side-by-side table, the issue's ratios (appended as one summary line) and the plot's data.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 - "$out" "$tmp" <<'PY'
import json, sys
out, tmp = sys.argv[1], sys.argv[2]
runs = [json.loads(l) for l in open(out) if l.startswith('{"bench":"activations"')]
MiB = 2**20
def label(r):
    return "t%d%s %s" % (r["t"], " SP" if r["sequence_parallel"] else "", r["recompute"])
def find(t, sp, recompute):
    return next(r for r in runs if r["t"] == t and r["sequence_parallel"] == sp and r["recompute"] == recompute)
print("%-20s %13s %13s %10s %11s %10s %9s %9s" % ("configuration", "measured MiB", "restated MiB", "meas/rest",
      "paper MiB", "meas/paper", "median s", "steps"), file=sys.stderr)
with open(tmp + "/plot.tsv", "w") as tsv:
    for r in runs:
        print("%-20s %13.1f %13.1f %10.4f %11.1f %10.3f %9.2f %9d" % (label(r), r["measured_bytes"] / MiB,
              r["restated_bytes"] / MiB, r["measured_over_restated"], r["paper_bytes"] / MiB,
              r["measured_over_paper"], r["median_step_s"], len(r["step_s"])), file=sys.stderr)
        tsv.write("%s\t%.2f\t%.2f\t%.2f\t%.3f\t%.3f\t%.3f\n" % (label(r), r["measured_bytes"] / MiB,
                  r["restated_bytes"] / MiB, r["paper_bytes"] / MiB, r["median_step_s"], min(r["step_s"]),
                  max(r["step_s"])))
base = find(1, False, "none")
with open(tmp + "/title", "w") as f:
    f.write("%d layers, hidden %d, %d heads, seq %d, micro-batch %d, fp32: per tensor-parallel rank"
            " (bench/activations)" % (base["layers"], base["hidden"], base["heads"], base["seq"], base["micro_batch"]))
summary = {"bench": "activations_summary",
           "selective_sp_t4_memory_reduction_vs_none_t1":
               base["measured_bytes"] / find(4, True, "selective")["measured_bytes"],
           "worst_measured_over_restated": max(abs(r["measured_over_restated"] - 1) for r in runs) + 1,
           "selective_over_none_median_step": {}, "full_over_none_median_step": {}}
for t, sp in ((1, False), (2, False), (2, True), (4, False), (4, True)):
    key = "t%d%s" % (t, "_sp" if sp else "")
    none = find(t, sp, "none")["median_step_s"]
    summary["selective_over_none_median_step"][key] = find(t, sp, "selective")["median_step_s"] / none
    summary["full_over_none_median_step"][key] = find(t, sp, "full")["median_step_s"] / none
with open(out, "a") as f:
    f.write(json.dumps(summary) + "\n")
print("selective + SP at t = 4 uses %.2fx less activation memory per rank than t = 1 without recomputation"
      % summary["selective_sp_t4_memory_reduction_vs_none_t1"], file=sys.stderr)
print("measured / restated: worst %.4f" % summary["worst_measured_over_restated"], file=sys.stderr)
for key, ratio in summary["selective_over_none_median_step"].items():
    print("%s: selective / none median step %.3f, full / none %.3f"
          % (key, ratio, summary["full_over_none_median_step"][key]), file=sys.stderr)
PY

png=${out%.jsonl}.png
gnuplot <<GP
set terminal pngcairo size 1200,900 noenhanced
set datafile separator "\t"
set output "$png"
set multiplot layout 2,1 title "$(cat "$tmp/title")"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set grid ytics
set key outside right
set xtics rotate by -30
set yrange [0:*]
set ylabel "activation MiB per rank"
plot "$tmp/plot.tsv" using 2:xtic(1) title "measured (arena)", "" using 3 title "restated (fp32, ours)", "" using 4 title "paper (2 bytes, masks 1)"
set ylabel "median forward+backward s"
set style histogram errorbars gap 1 lw 1
plot "$tmp/plot.tsv" using 5:6:7:xtic(1) title "median step (bars: min and max)"
unset multiplot
GP
echo "bench/activations: results in $out and $png" >&2
