#!/usr/bin/env bash
# gpt_train's memory guard (train/memory_guard.h) under mpiexec: on 2 ranks at ZeRO stage 3, the peak the guard
# predicts is within 10% of each rank's measured peak RSS (VmHWM, from the last metrics line); a --memory-limit
# with the prediction at 80% of it trains; one at half the prediction stops every rank with the same one line
# and exit code 2 before anything is allocated, as does a 40-layer, 6144-hidden model (no bad_alloc).
# Arg: path of gpt_train.
set -uo pipefail
TRAIN=$1
source "$(dirname "$0")/test_lib.sh"
run_mpi() {  # args...
  timeout --signal=KILL 120 mpiexec -n 2 "$TRAIN" "$@"
}
expect_guard_stop() {  # name args...
  local name=$1
  shift
  run_mpi "$@" >/dev/null 2>"$TMP/err"
  local rc=$?
  [[ $rc == 2 ]] || fail "$name: exit code $rc, expected 2: $(cat "$TMP/err")"
  [[ $(grep -c . "$TMP/err") == 2 ]] || fail "$name: expected 2 lines (one per rank), got: $(cat "$TMP/err")"
  [[ $(sort -u "$TMP/err" | wc -l) == 1 ]] || fail "$name: ranks printed different lines: $(cat "$TMP/err")"
  grep -q "gpt_train: memory: rank [01] needs .* but may use .*--plan prints the table" "$TMP/err" ||
    fail "$name: not the guard's line: $(cat "$TMP/err")"
}

write_random_shard "$TMP/data.bin" 20000
MODEL=(--num-layers 4 --hidden-size 256 --num-attention-heads 4 --seq-length 64 --vocab-size 16384 --threads 1
  --data-path "$TMP/data.bin" --fp16 --zero-stage 3 --micro-batch-size 2 --train-iters 2 --eval-iters 2)

out=$(run_mpi "${MODEL[@]}" --memory-limit 1TiB --metrics-file "$TMP/m.jsonl" 2>&1) || fail "run failed: $out"
grep -q "^  memory guard: each rank needs up to" <<<"$out" || fail "no guard line in the banner: $out"
grep -q "^  peak RSS (VmHWM) .* the total is" <<<"$out" || fail "no peak RSS in the first step's table: $out"
grep -q '"peak_rss_bytes":' "$TMP/m.jsonl" || fail "no peak_rss_bytes in the metrics: $(head -1 "$TMP/m.jsonl")"
last=$(grep peak_rss_bytes_per_rank "$TMP/m.jsonl")
predicted=$(sed 's/.*"predicted_peak_bytes":\([0-9.e+]*\).*/\1/' <<<"$last")
for peak in $(sed 's/.*"peak_rss_bytes_per_rank":\[\([^]]*\)\].*/\1/' <<<"$last" | tr ',' ' '); do
  awk -v p="$predicted" -v m="$peak" 'BEGIN { d = p / m - 1; exit !(d < 0.1 && d > -0.1) }' ||
    fail "predicted $predicted bytes is not within 10% of the peak RSS $peak"
done
echo "predicted $predicted bytes, peaks: $last"

# 2 ranks share this machine: a limit of 2 x predicted / 0.8 puts the prediction at 80% of each rank's share.
limit=$(awk -v p="$predicted" 'BEGIN { printf "%.0f", 2 * p / 0.8 }')
out=$(run_mpi "${MODEL[@]}" --memory-limit "$limit" 2>&1) || fail "80% of --memory-limit $limit failed: $out"
grep -q "^step     2/2" <<<"$out" || fail "80% of --memory-limit did not train: $out"

limit=$(awk -v p="$predicted" 'BEGIN { printf "%.0f", 2 * p * 0.5 }')
expect_guard_stop "half the prediction" "${MODEL[@]}" --memory-limit "$limit"
grep -q "; would fit: \|; none of more ranks, a higher stage, NVMe offload, activation checkpointing or tiling" \
  "$TMP/err" || fail "the line does not say what would fit: $(cat "$TMP/err")"

start=$(date +%s)
expect_guard_stop "40 x 6144" --num-layers 40 --hidden-size 6144 --num-attention-heads 48 --seq-length 512 \
  --micro-batch-size 1 --fp16 --threads 1 --vocab-size 16384 --data-path "$TMP/data.bin" --memory-limit 20GiB
(($(date +%s) - start < 30)) || fail "the guard took $(($(date +%s) - start)) s to stop a model that cannot fit"

[[ $failures == 0 ]] && echo PASS
exit $((failures > 0))
