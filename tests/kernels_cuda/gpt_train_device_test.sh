#!/usr/bin/env bash
# gpt_train --device cuda in a --config=cuda build. Without a GPU: one stderr line naming the missing device,
# exit 2. With one: 5 fp32 steps of a tiny model on the GPU against the same run on the CPU, |loss
# difference| <= 1e-4 at every step (scripts/gpu_check runs the long form at GPT-2 124M).
# Arg: path of gpt_train.
set -uo pipefail
TRAIN=$1
source "$(dirname "$0")/../train/test_lib.sh"

write_random_shard "$TMP/train.bin" 4000
TINY=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --vocab-size 16384
  --micro-batch-size 2 --train-iters 5 --lr 1e-3 --threads 1 --data-path "$TMP/train.bin")

if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  "$TRAIN" "${TINY[@]}" --device cuda >/dev/null 2>"$TMP/err"
  rc=$?
  [[ $rc == 2 ]] || fail "no GPU: exit code $rc, expected 2 ($(cat "$TMP/err"))"
  [[ $(wc -l <"$TMP/err") == 1 ]] || fail "no GPU: expected one stderr line, got: $(cat "$TMP/err")"
  grep -qF -- "--device cuda: no CUDA device is usable on this machine" "$TMP/err" ||
    fail "no GPU: unexpected message: $(cat "$TMP/err")"
else
  "$TRAIN" "${TINY[@]}" --device cpu --metrics-file "$TMP/cpu.jsonl" >/dev/null || fail "CPU run failed"
  "$TRAIN" "${TINY[@]}" --device cuda --metrics-file "$TMP/cuda.jsonl" >"$TMP/cuda.out" 2>&1 ||
    fail "CUDA run failed: $(tail -5 "$TMP/cuda.out")"
  python3 - "$TMP/cpu.jsonl" "$TMP/cuda.jsonl" <<'PY' || fail "losses differ"
import json, sys
cpu, gpu = ([json.loads(l) for l in open(p) if '"loss"' in l] for p in sys.argv[1:3])
assert len(cpu) == len(gpu) == 5, (len(cpu), len(gpu))
for a, b in zip(cpu, gpu):
    assert b["device"] == "cuda", b
    print(f'step {a["step"]}: cpu {a["loss"]:.6f} cuda {b["loss"]:.6f} diff {abs(a["loss"] - b["loss"]):.2e}')
    assert abs(a["loss"] - b["loss"]) <= 1e-4
PY
fi
if ((failures)); then
  echo "$failures check(s) failed" >&2
  exit 1
fi
echo "gpt_train --device cuda checks passed"
