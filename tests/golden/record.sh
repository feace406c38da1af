#!/usr/bin/env bash
# Runs the golden configurations and writes their outputs to OUT_DIR:
#   record.sh GPT_TRAIN ZEROPP_BENCH OUT_DIR
# - gpt_train_stage{0..3}_{fp32,fp16}[_ckpt].jsonl: gpt_train's metrics file, 4 ranks as 2 nodes x 2, 10 steps,
#   dropout, clipping, 2 micro-steps per step, small buckets with overlap, with and without
#   --checkpoint-activations;
# - zeropp.jsonl and zeropp_{zero3,qwz,hpz,qgz,zeropp}.json: bench/zeropp's summary lines and per-step curves,
#   4 ranks as 2 x 2, fp16, 20 steps.
# Everything runs with --threads 1 on a token shard generated here, so the outputs depend only on the code and
# the CPU's instructions (isa_flags.sh). tests/golden/data holds the recording made on an AVX2 machine before
# the one-loop refactor, tests/golden/data_avx512 one made on an AVX-512 machine at issue 35's start;
# golden_test.sh runs this again and compares with the set of this machine's class. Since stage 3 sends the
# next step's first gather from the optimizer (ZeroEngine::NextCall), the stage 3 files' first step counts one
# more wte gather and their last step one fewer; those byte fields were moved by hand, by exactly that
# gather (the run's total bytes, and every loss, unchanged).
set -euo pipefail
TRAIN=$1 ZEROPP=$2 OUT=$3
mkdir -p "$OUT"

# 8192 tokens below 512 from a fixed generator, with a pattern to learn: an llm.c shard (256 int32 header:
# magic 20240520, version 1, count; then uint16 tokens).
awk 'BEGIN {
  n = 8192; s = 12345
  printf "\\x%02x\\x%02x\\x%02x\\x%02x", 20240520 % 256, int(20240520 / 256) % 256, int(20240520 / 65536) % 256, 1
  printf "\\x01\\x00\\x00\\x00\\x00\\x20\\x00\\x00"
  for (i = 0; i < 253 * 4; ++i) printf "\\x00"
  for (i = 0; i < n; ++i) {
    s = (s * 75 + 74) % 65537
    id = (i % 4 == 0) ? (i * 7) % 13 : s % 512
    printf "\\x%02x\\x%02x", id % 256, int(id / 256)
  }
}' >"$OUT/escapes"
printf "$(cat "$OUT/escapes")" >"$OUT/data.bin"
rm "$OUT/escapes"

cat >"$OUT/ds.json" <<'JSON'
{ "zero_optimization": { "reduce_bucket_size": 30000, "overlap_comm": true } }
JSON
MODEL=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32
  --vocab-size 512 --micro-batch-size 2 --global-batch-size 16 --threads 1 --seed 1234 --lr 1e-3
  --ranks-per-node 2 --data-path "$OUT/data.bin")
run() { timeout --signal=KILL 300 mpiexec -n 4 "$@"; }

for stage in 0 1 2 3; do
  for precision in fp32 fp16; do
    for ckpt in "" _ckpt; do
      name="gpt_train_stage${stage}_${precision}${ckpt}"
      extra=()
      [[ $precision == fp16 ]] && extra+=(--fp16)
      [[ -n $ckpt ]] && extra+=(--checkpoint-activations)
      run "$TRAIN" "${MODEL[@]}" --zero-stage "$stage" "${extra[@]}" --hidden-dropout 0.1 --attention-dropout 0.1 \
        --clip-grad 1.0 --weight-decay 0.1 --train-iters 10 --deepspeed_config "$OUT/ds.json" \
        --metrics-file "$OUT/$name.jsonl" >"$OUT/$name.log" 2>&1 || {
        cat "$OUT/$name.log" >&2
        exit 1
      }
      rm "$OUT/$name.log"
    done
  done
done

mkdir -p "$OUT/curves"
run "$ZEROPP" "${MODEL[@]}" --fp16 --steps 20 --curves-dir "$OUT/curves" >"$OUT/zeropp.jsonl"
for f in "$OUT"/curves/*.json; do mv "$f" "$OUT/zeropp_$(basename "$f")"; done
rmdir "$OUT/curves"
rm "$OUT/data.bin" "$OUT/ds.json"
