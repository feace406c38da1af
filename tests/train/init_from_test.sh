#!/usr/bin/env bash
# --init-from: gpt_train started from a model file that gpt_export wrote of its own initialization (same flags,
# same seed), in llm.c's format or as a Hugging Face model.safetensors, logs exactly the loss of a run that
# initializes itself, on 2 ranks at ZeRO stage 3; and a file of another shape is refused naming the flag to
# change.
# Args: paths of gpt_train and gpt_export.
set -uo pipefail
TRAIN=$1 EXPORT=$2
source "$(dirname "$0")/test_lib.sh"
write_random_shard "$TMP/data.bin" 4000
SHAPE=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --vocab-size 16384 --max-position-embeddings 1024 --seed 77)
TRAIN_ARGS=("${SHAPE[@]}" --seq-length 32 --micro-batch-size 2 --threads 1 --zero-stage 3 --data-path "$TMP/data.bin"
  --split 100,0,0 --hidden-dropout 0 --attention-dropout 0 --train-iters 2)
"$EXPORT" --init-only "${SHAPE[@]}" --output "$TMP/init.bin" >/dev/null || fail "gpt_export --init-only failed"
mpiexec -n 2 "$TRAIN" "${TRAIN_ARGS[@]}" --metrics-file "$TMP/own.jsonl" >/dev/null 2>&1 || fail "own init run failed"
mpiexec -n 2 "$TRAIN" "${TRAIN_ARGS[@]}" --init-from "$TMP/init.bin" --metrics-file "$TMP/file.jsonl" >"$TMP/out" 2>&1 ||
  fail "--init-from run failed: $(tail -2 "$TMP/out")"
grep -q "weights from $TMP/init.bin" "$TMP/out" || fail "--init-from not reported"
own=$(grep -o '"step":1,"loss":[-0-9.e]*' "$TMP/own.jsonl")
from_file=$(grep -o '"step":1,"loss":[-0-9.e]*' "$TMP/file.jsonl")
[[ -n $own && $own == "$from_file" ]] || fail "step-1 loss differs: own '$own', from file '$from_file'"
# The same weights as a Hugging Face model.safetensors (with config.json beside it) give the same loss.
mkdir -p "$TMP/hf"
"$EXPORT" --model "$TMP/init.bin" --format safetensors --output "$TMP/hf/model.safetensors" >/dev/null ||
  fail "gpt_export --format safetensors failed"
mpiexec -n 2 "$TRAIN" "${TRAIN_ARGS[@]}" --init-from "$TMP/hf/model.safetensors" --metrics-file "$TMP/hf.jsonl" \
  >"$TMP/out" 2>&1 || fail "--init-from safetensors run failed: $(tail -2 "$TMP/out")"
from_hf=$(grep -o '"step":1,"loss":[-0-9.e]*' "$TMP/hf.jsonl")
[[ $own == "$from_hf" ]] || fail "step-1 loss from safetensors differs: own '$own', from safetensors '$from_hf'"
mpiexec -n 2 "$TRAIN" "${TRAIN_ARGS[@]}" --num-layers 3 --init-from "$TMP/init.bin" >/dev/null 2>"$TMP/err"
rc=$?
[[ $rc == 2 ]] || fail "shape mismatch: exit code $rc"
grep -q -- "--num-layers" "$TMP/err" || fail "shape mismatch: message lacks the flag: $(cat "$TMP/err")"
((failures == 0)) && echo "init-from reproduces the initialization's loss: $own"
exit $((failures > 0))
