#!/usr/bin/env bash
# Pipeline parallelism in gpt_train (issue 34): fp32, dropout on, 10 steps, the same global batch and
# data-parallel size d. p = 2 and p = 4 give p = 1's first loss bit for bit and every later loss within 1e-6
# relative, and the gradient norm too, with 1F1B and interleaved (p = 2, 2 chunks a stage; at ZeRO stages 0-3)
# alike, and with full recomputation: only the tied wte's two halves, and the norm's partial sums over each stage's
# parameters, are added in another order. So does an uneven split with selective recomputation, and ZeRO stages 1-3 at p = 2 x d = 2. t = 2 x p = 2 x
# d = 2 at stage 1 stays within 1e-5 of t = p = 1, d = 2, and with ZeRO++ within 5e-3 of ZeRO-3 (and above
# 0). The meter's pp_p2p bytes equal the closed form 2 (p v - 1) m d t B T C 4: every micro-batch's
# activation forward and its gradient back over each of the p v - 1 chunk boundaries. At t > 1 that is
# Megatron's scatter-gather: each tensor-parallel rank sends 1/t of the [B, T, C] between the stages
# (2 (p v - 1) m d B T C 4, inter-node when the stages sit on different nodes) and the receiving tensor group
# all-gathers it inside its node ((t - 1) times that); with --sequence-parallel each rank sends its own T/t
# part and nothing is gathered.
# Args: path of gpt_train.
set -uo pipefail
TRAIN=$1
source "$(dirname "$0")/test_lib.sh"
write_seeded_shard "$TMP/data.bin" 20000 5
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# run NAME RANKS FLAGS...: 10 steps of a 4-layer model, 32 tokens of width 64, metrics in $TMP/NAME.jsonl.
run() {
  local name=$1 ranks=$2
  shift 2
  timeout --signal=KILL 300 mpiexec -n "$ranks" "$TRAIN" --num-layers 4 --hidden-size 64 --num-attention-heads 4 \
    --seq-length 32 --micro-batch-size 1 --vocab-size 16384 --train-iters 10 --lr 1e-3 --hidden-dropout 0.1 \
    --attention-dropout 0.1 --seed 7 --data-path "$TMP/data.bin" --threads 1 --log-interval 10 \
    --metrics-file "$TMP/$name.jsonl" "$@" >"$TMP/$name.log" 2>&1 ||
    fail "$name: exit code $? ($(tail -3 "$TMP/$name.log"))"
}

# compare REFERENCE NAME TOLERANCE FIRST P2P_BYTES: losses and gradient norms within TOLERANCE relative; FIRST
# "exact": the first loss bit for bit, "lossy": the losses alone are compared and must differ (ZeRO++'s
# quantization), anything else: no more; and the pp_p2p bytes of every step (all ranks) equal to P2P_BYTES.
compare() {
  python3 - "$TMP/$1.jsonl" "$TMP/$2.jsonl" "$3" "$4" "$5" <<'PY' || fail "$2 differs from $1"
import json, sys
def steps(path):
    return [json.loads(l) for l in open(path) if '"loss"' in l and '"grad_norm"' in l]
a, b = steps(sys.argv[1]), steps(sys.argv[2])
tolerance, first, p2p = float(sys.argv[3]), sys.argv[4], int(sys.argv[5])
if len(a) != 10 or len(b) != 10:
    sys.exit(f"steps: {len(a)} and {len(b)}")
keys = ("loss",) if first == "lossy" else ("loss", "grad_norm")
worst = {k: max(abs(x[k] - y[k]) / abs(x[k]) for x, y in zip(a, b)) for k in keys}
metered = {sum(r["bytes_by_phase"]["pp_p2p"].values()) for r in b}
print(f"{sys.argv[2].rsplit('/', 1)[1]}: worst relative difference: "
      + ", ".join(f"{k} {v:.2e}" for k, v in worst.items())
      + f"; first loss {'identical' if a[0]['loss'] == b[0]['loss'] else 'differs'}; "
      f"pp_p2p {sorted(metered)} bytes a step, closed form {p2p}")
ok = max(worst.values()) <= tolerance and metered == {p2p}
ok = ok and (first != "exact" or a[0]["loss"] == b[0]["loss"]) and (first != "lossy" or worst["loss"] > 0)
sys.exit(0 if ok else 1)
PY
}

activation=$((1 * 32 * 64 * 4))  # B T C fp32 bytes
run p1 1 --global-batch-size 4
run p2 2 --global-batch-size 4 --pipeline-model-parallel-size 2 && compare p1 p2 1e-6 exact $((2 * 1 * 4 * activation))
run p4 4 --global-batch-size 4 --pipeline-model-parallel-size 4 && compare p1 p4 1e-6 exact $((2 * 3 * 4 * activation))
run p1_sel 1 --global-batch-size 4 --recompute-activations
run p2_uneven_sel 2 --global-batch-size 4 --pipeline-model-parallel-size 2 --decoder-last-pipeline-num-layers 1 \
  --recompute-activations && compare p1_sel p2_uneven_sel 1e-6 exact $((2 * 1 * 4 * activation))
# Full recomputation, its chunks of 2 blocks counted in each stage (Megatron's), here the same blocks.
run p1_full 1 --global-batch-size 4 --recompute-granularity full --recompute-method uniform --recompute-num-layers 2
run p2_full 2 --global-batch-size 4 --pipeline-model-parallel-size 2 --recompute-granularity full \
  --recompute-method uniform --recompute-num-layers 2 && compare p1_full p2_full 1e-6 exact $((2 * 1 * 4 * activation))
# The interleaved schedule: 2 chunks of 1 layer on each of 2 stages, 3 boundaries.
run p2_interleaved 2 --global-batch-size 4 --pipeline-model-parallel-size 2 \
  --num-layers-per-virtual-pipeline-stage 1 && compare p1 p2_interleaved 1e-6 exact $((2 * 3 * 4 * activation))
run d2 2 --global-batch-size 8 --zero-stage 1
run p2d2 4 --global-batch-size 8 --zero-stage 1 --pipeline-model-parallel-size 2 &&
  compare d2 p2d2 1e-6 exact $((2 * 1 * 4 * 2 * activation))
run t2p2d2 8 --global-batch-size 8 --zero-stage 1 --pipeline-model-parallel-size 2 --tensor-model-parallel-size 2 &&
  compare d2 t2p2d2 1e-5 any $((2 * 1 * 4 * 2 * 2 * activation))
# ZeRO stages 2 and 3 inside the stages, and ZeRO++ (qwZ, hpZ over the stage's 2 data-parallel ranks of a
# node, qgZ falling back to the ring on one node) at t = 2 x p = 2 x d = 2 against plain ZeRO-3 at d = 2:
# within 5e-3, and not equal (the quantization is lossy). Stages sit on separate nodes of 4 ranks, so the
# messages between them are inter-node.
for stage in 2 3; do
  run d2_s$stage 2 --global-batch-size 8 --zero-stage $stage
  run p2d2_s$stage 4 --global-batch-size 8 --zero-stage $stage --pipeline-model-parallel-size 2 &&
    compare d2_s$stage p2d2_s$stage 1e-6 exact $((2 * 1 * 4 * 2 * activation))
  # Interleaved: each chunk's backward reduces its own buckets as a micro-step of its own.
  run p2d2_s${stage}_interleaved 4 --global-batch-size 8 --zero-stage $stage --pipeline-model-parallel-size 2 \
    --num-layers-per-virtual-pipeline-stage 1 &&
    compare d2_s$stage p2d2_s${stage}_interleaved 1e-6 exact $((2 * 3 * 4 * 2 * activation))
done
# Stage 3 keeping each stage's gathered weights for all of the step's micro-batches
# (stage3_gather_once_per_step): bit for bit the re-gathering run, with one forward gather a step and none
# in the backward.
echo '{"zero_optimization": {"stage": 3, "stage3_gather_once_per_step": true}}' >"$TMP/once.json"
run p2d2_s3_once 4 --global-batch-size 8 --pipeline-model-parallel-size 2 --deepspeed_config "$TMP/once.json" &&
  compare p2d2_s3 p2d2_s3_once 0 exact $((2 * 1 * 4 * 2 * activation))
python3 - "$TMP/p2d2_s3.jsonl" "$TMP/p2d2_s3_once.jsonl" <<'PY' || fail "p2d2_s3_once: gathers not once per step"
import json, sys
def gathered(path, phase):
    return {sum(json.loads(l)["bytes_by_phase"][phase].values()) for l in open(path) if '"loss"' in l}
every, once = (gathered(sys.argv[i], "param_gather_fwd").pop() for i in (1, 2))
backward = gathered(sys.argv[2], "param_gather_bwd")
print(f"p2d2_s3_once: forward gathers {once} bytes a step against {every} (4 micro-batches), backward {backward}")
sys.exit(0 if once * 4 == every and backward == {0} else 1)
PY
echo '{"zero_optimization": {"stage": 3, "zero_hpz_partition_size": 2, "zero_quantized_weights": true,
 "zero_quantized_gradients": true}}' >"$TMP/zeropp.json"
run t2p2d2_zeropp 8 --global-batch-size 8 --pipeline-model-parallel-size 2 --tensor-model-parallel-size 2 \
  --ranks-per-node 4 --deepspeed_config "$TMP/zeropp.json" &&
  compare d2_s3 t2p2d2_zeropp 5e-3 lossy $((2 * 1 * 4 * 2 * 2 * activation))
# Only 1/t of each boundary tensor crossed between the nodes (scatter-gather); the rest was gathered inside.
python3 - "$TMP/t2p2d2_zeropp.jsonl" $((2 * 1 * 4 * 2 * activation)) <<'PY' || fail "t2p2d2_zeropp: pp_p2p by link"
import json, sys
links = {tuple(sorted(json.loads(l)["bytes_by_phase"]["pp_p2p"].items())) for l in open(sys.argv[1]) if '"loss"' in l}
expected = int(sys.argv[2])
print(f"t2p2d2_zeropp: pp_p2p by link {sorted(links)}, closed form inter {expected}, intra {expected}")
sys.exit(0 if links == {(("inter", expected), ("intra", expected))} else 1)
PY
# With sequence parallelism each tensor-parallel rank sends its own sequence part: the same bytes, no gather.
run t2p2d2_sp 8 --global-batch-size 8 --zero-stage 1 --pipeline-model-parallel-size 2 --tensor-model-parallel-size 2 \
  --sequence-parallel && compare d2 t2p2d2_sp 1e-5 any $((2 * 1 * 4 * 2 * activation))
if ((failures)); then
  echo "$failures check(s) failed" >&2
  exit 1
fi
