#!/usr/bin/env bash
# --init-from: gpt_train started from a model file that gpt_export wrote of its own initialization (same flags,
# same seed) logs exactly the loss of a run that initializes itself, on 2 ranks at ZeRO stage 3; and a file of
# another shape is refused naming the flag to change.
# Args: paths of gpt_train and gpt_export.
set -uo pipefail
TRAIN=$1 EXPORT=$2
TMP=${TEST_TMPDIR:-$(mktemp -d)}
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}
le32() { printf "\\x$(printf %02x $(($1 & 255)))\\x$(printf %02x $((($1 >> 8) & 255)))\\x$(printf %02x $((($1 >> 16) & 255)))\\x$(printf %02x $((($1 >> 24) & 255)))"; }
{ le32 20240520; le32 1; le32 4000; head -c 1012 /dev/zero; head -c 8000 /dev/urandom | tr '\200-\377' '\000-\177' | tr '\100-\177' '\000-\077'; } >"$TMP/data.bin"
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
mpiexec -n 2 "$TRAIN" "${TRAIN_ARGS[@]}" --num-layers 3 --init-from "$TMP/init.bin" >/dev/null 2>"$TMP/err"
rc=$?
[[ $rc == 2 ]] || fail "shape mismatch: exit code $rc"
grep -q -- "--num-layers" "$TMP/err" || fail "shape mismatch: message lacks the flag: $(cat "$TMP/err")"
((failures == 0)) && echo "init-from reproduces the initialization's loss: $own"
exit $((failures > 0))
