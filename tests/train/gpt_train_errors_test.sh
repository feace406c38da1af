#!/usr/bin/env bash
# gpt_train end to end on a tiny shard, and its answers to bad input: a shard with a wrong magic, a truncated
# body or a token id >= the vocabulary, and bad flag values. Each error must be one stderr line naming the
# problem (and for shards the file and byte offset), with exit code 2.
# Arg: path of gpt_train.
set -uo pipefail
TRAIN=$1
source "$(dirname "$0")/test_lib.sh"

# Runs a command that must fail with exit code 2 and one stderr line containing every given fragment.
expect_error() {  # name "fragment|fragment..." command...
  local name=$1 fragments=$2
  shift 2
  "$@" >/dev/null 2>"$TMP/err"
  local rc=$?
  [[ $rc == 2 ]] || fail "$name: exit code $rc, expected 2 ($(cat "$TMP/err"))"
  [[ $(wc -l <"$TMP/err") == 1 ]] || fail "$name: expected one stderr line, got: $(cat "$TMP/err")"
  local fragment
  IFS='|' read -ra list <<<"$fragments"
  for fragment in "${list[@]}"; do
    grep -qF -- "$fragment" "$TMP/err" || fail "$name: stderr lacks '$fragment': $(cat "$TMP/err")"
  done
}

ids=()
for i in $(seq 0 299); do ids+=($(((i * 37 + 5) % 97))); done
write_shard "$TMP/good.bin" "${ids[@]}"
[[ $(stat -c %s "$TMP/good.bin") == $((1024 + 600)) ]] || fail "test shard has the wrong size"

TINY=(--num-layers 2 --hidden-size 32 --num-attention-heads 2 --seq-length 16 --vocab-size 100
  --micro-batch-size 2 --threads 1)
out=$("$TRAIN" "${TINY[@]}" --train-iters 3 --data-path "$TMP/good.bin" 2>&1) || fail "training failed: $out"
grep -q "step     3/3 | loss" <<<"$out" || fail "no step lines: $out"
# MFU against the stated peak of the cores (named in the banner) cannot pass 100%, however busy the machine.
grep -qE "^  MFU peak: 1 core x .* GFLOP/s per rank \(cores: 1 thread per rank" <<<"$out" ||
  fail "no stated MFU peak: $out"
awk -F'MFU ' '/^step/ { split($2, v, "%"); if (v[1] + 0 > 100) bad = 1 } END { exit bad }' <<<"$out" ||
  fail "MFU over 100%: $out"
out=$("$TRAIN" "${TINY[@]}" --train-iters 1 --peak-tflops 0.25 --data-path "$TMP/good.bin" 2>&1) ||
  fail "training with --peak-tflops failed: $out"
grep -qF "  MFU peak: 250 GFLOP/s per rank (--peak-tflops)" <<<"$out" || fail "--peak-tflops not named: $out"

cp "$TMP/good.bin" "$TMP/magic.bin"
printf '\x01' | dd of="$TMP/magic.bin" bs=1 seek=0 conv=notrunc status=none
expect_error "wrong magic" "$TMP/magic.bin|magic|byte offset 0" \
  "$TRAIN" "${TINY[@]}" --data-path "$TMP/magic.bin"
cp "$TMP/good.bin" "$TMP/short.bin"
truncate -s -3 "$TMP/short.bin"
expect_error "truncated body" "$TMP/short.bin|truncated|byte offset" \
  "$TRAIN" "${TINY[@]}" --data-path "$TMP/short.bin"
expect_error "token id >= vocabulary" "$TMP/good.bin|token id 79 at byte offset 1028|vocabulary size 64" \
  "$TRAIN" "${TINY[@]}" --vocab-size 64 --data-path "$TMP/good.bin"
expect_error "no shard" "$TMP/none_*.bin" "$TRAIN" "${TINY[@]}" --data-path "$TMP/none_*.bin"

expect_error "non-numeric" "--hidden-size expects an integer, got 'wide'" \
  "$TRAIN" "${TINY[@]}" --hidden-size wide --data-path "$TMP/good.bin"
expect_error "zero layers" "--num-layers is 0, outside its range" \
  "$TRAIN" "${TINY[@]}" --num-layers 0 --data-path "$TMP/good.bin"
expect_error "heads do not divide" "--hidden-size 30 is not divisible by --num-attention-heads 4" \
  "$TRAIN" "${TINY[@]}" --hidden-size 30 --num-attention-heads 4 --data-path "$TMP/good.bin"
expect_error "sequence too long" "--seq-length 2048 exceeds --max-position-embeddings 1024" \
  "$TRAIN" "${TINY[@]}" --seq-length 2048 --data-path "$TMP/good.bin"
expect_error "learning rate" "--lr expects a number, got 'fast'" "$TRAIN" "${TINY[@]}" --lr fast
expect_error "peak TFLOP/s" "--peak-tflops '-2' is not a positive number of TFLOP/s|for example 67" \
  "$TRAIN" "${TINY[@]}" --data-path "$TMP/good.bin" --peak-tflops -2
expect_error "unknown flag" "unknown flag --num-layer; did you mean --num-layers?" "$TRAIN" --num-layer 2
expect_error "missing data" "--data-path is required" "$TRAIN" "${TINY[@]}"
expect_error "unknown device" "--device tpu: unknown device; use one of cpu|cuda" \
  "$TRAIN" "${TINY[@]}" --data-path "$TMP/good.bin" --device tpu
# This test runs the default build, which has no CUDA backend (tests/kernels_cuda runs the --config=cuda one).
expect_error "no CUDA backend" "--device cuda: this binary was built without the CUDA backend|--config=cuda" \
  "$TRAIN" "${TINY[@]}" --data-path "$TMP/good.bin" --device cuda

if ((failures)); then
  echo "$failures check(s) failed" >&2
  exit 1
fi
echo "all gpt_train checks passed"
