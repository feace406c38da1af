#!/usr/bin/env bash
# Checkpoints across pipeline splits (issue 34): a p = 2 x d = 2 run (ZeRO-3, fp32, dropout on) saves after
# step 5, each stage its own shard files. Resumed at p = 2 x d = 2, steps 6-10 give the uninterrupted run's
# losses and gradient norms bit for bit; resumed at p = 1 (d = 2) and at p = 4 (d = 2), and at t = 2 x p = 2
# x d = 2 with an uneven split, within 1e-6 relative (the model is the same at any p; only the tied wte's two
# gradient halves and the norm's per-stage sums add in another order). --init-from at p = 2 and at t = 2
# starts from a whole model file exactly as p = 1 does. gpt_export reassembles the whole model from the p = 2
# checkpoint: equal to the export of a p = 1 run's checkpoint at the same step within training's rounding.
# Args: path of gpt_train, path of gpt_export.
set -uo pipefail
TRAIN=$1 EXPORT=$2
source "$(dirname "$0")/test_lib.sh"
write_seeded_shard "$TMP/data.bin" 20000 5
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# run NAME RANKS FLAGS...: a 4-layer model, 32 tokens of width 64, global batch 8, metrics in $TMP/NAME.jsonl.
run() {
  local name=$1 ranks=$2
  shift 2
  timeout --signal=KILL 300 mpiexec -n "$ranks" "$TRAIN" --num-layers 4 --hidden-size 64 \
    --num-attention-heads 4 --seq-length 32 --micro-batch-size 1 --global-batch-size 8 --vocab-size 16384 \
    --lr 1e-3 --hidden-dropout 0.1 --attention-dropout 0.1 --seed 7 --data-path "$TMP/data.bin" --threads 1 \
    --log-interval 10 --zero-stage 3 --metrics-file "$TMP/$name.jsonl" "$@" >"$TMP/$name.log" 2>&1 ||
    fail "$name: exit code $? ($(tail -3 "$TMP/$name.log"))"
}

# resumed NAME TOLERANCE: steps 6-10 of NAME against the uninterrupted run's, losses and gradient norms within
# TOLERANCE relative (0: bit for bit).
resumed() {
  grep -qF "resuming after step 5" "$TMP/$1.log" || fail "$1 did not resume after step 5"
  python3 - "$TMP/full.jsonl" "$TMP/$1.jsonl" "$2" <<'PY' || fail "$1: the resumed steps differ"
import json, sys
def steps(path):
    return {r["step"]: r for r in map(json.loads, open(path)) if "grad_norm" in r}
full, resumed, tolerance = steps(sys.argv[1]), steps(sys.argv[2]), float(sys.argv[3])
numbers = sorted(resumed)
worst = max(abs(full[s][k] - resumed[s][k]) / abs(full[s][k]) for s in numbers for k in ("loss", "grad_norm"))
print(f"{sys.argv[2].rsplit('/', 1)[1]}: steps {numbers[0]}-{numbers[-1]}, worst relative difference {worst:.2e}")
sys.exit(0 if numbers == list(range(6, 11)) and worst <= tolerance else 1)
PY
}

run full 4 --pipeline-model-parallel-size 2 --train-iters 10 --save "$TMP/ckpt" --save-interval 5
grep -q '"stages": 2' "$TMP/ckpt/global_step5/manifest.json" || fail "the manifest lacks the pipeline's stages"
ls "$TMP/ckpt/global_step5" | grep -q "shard_00001_of_00002_pp_01_of_02.bin" || fail "no per-stage shard files"
run at_p2 4 --pipeline-model-parallel-size 2 --train-iters 10 --load "$TMP/ckpt/global_step5" && resumed at_p2 0
run at_p1 2 --train-iters 10 --load "$TMP/ckpt/global_step5" && resumed at_p1 1e-6
run at_p4 8 --pipeline-model-parallel-size 4 --train-iters 10 --load "$TMP/ckpt/global_step5" &&
  resumed at_p4 1e-6
run at_t2p2_uneven 8 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 \
  --decoder-first-pipeline-num-layers 3 --train-iters 10 --load "$TMP/ckpt/global_step5" &&
  resumed at_t2p2_uneven 1e-5

# gpt_export of the p = 2 checkpoint against a p = 1 run's at the same step (test_lib.sh: compare_exports).
run ref_p1 2 --train-iters 5 --save "$TMP/ckpt_p1"
compare_exports "$EXPORT" "$TMP/ckpt_p1" "$TMP/ckpt/global_step5" 1e-3 5 "the exported p = 2 model differs from p = 1's"
mv "$TMP/export_b.bin" "$TMP/p2.bin"  # the p = 2 checkpoint's export

# --init-from a whole model file: at p = 2 and at t = 2 x p = 2 the first step's loss is p = 1's from the
# same file (the engine cuts its stage and slice out of the whole model).
run init_p1 2 --train-iters 1 --init-from "$TMP/p2.bin"
run init_p2 4 --train-iters 1 --init-from "$TMP/p2.bin" --pipeline-model-parallel-size 2
run init_t2p2 8 --train-iters 1 --init-from "$TMP/p2.bin" --pipeline-model-parallel-size 2 \
  --tensor-model-parallel-size 2
python3 - "$TMP"/init_p1.jsonl "$TMP"/init_p2.jsonl "$TMP"/init_t2p2.jsonl <<'PY' || fail "--init-from differs across p"
import json, sys
first = [next(json.loads(l)["loss"] for l in open(p) if '"loss"' in l) for p in sys.argv[1:]]
print(f"--init-from, first loss at p = 1, p = 2, t = 2 x p = 2: {first}")
sys.exit(0 if first[1] == first[0] and abs(first[2] - first[0]) <= 1e-6 * first[0] else 1)
PY
((failures == 0)) && echo "checkpoints load across pipeline splits"
exit $((failures > 0))
