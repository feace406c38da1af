#!/usr/bin/env bash
# gpt_train under mpiexec: a 4-rank ZeRO-3 fp16 run on 2 simulated nodes writes a metrics file with every
# field; bad settings (--ranks-per-node that does not divide the world, a stage outside 0-3, batch sizes that
# break global = micro x accumulation x world, in flags or JSON) stop every rank with the same one line and
# exit code 2, without hanging.
# Arg: path of gpt_train.
set -uo pipefail
TRAIN=$1
source "$(dirname "$0")/test_lib.sh"
run_mpi() {  # ranks args...
  local n=$1
  shift
  timeout --signal=KILL 120 mpiexec -n "$n" "$TRAIN" "$@"
}
# Every one of N ranks must print the same single line containing the fragment; exit code 2.
expect_all_ranks_error() {  # name ranks fragment args...
  local name=$1 n=$2 fragment=$3
  shift 3
  run_mpi "$n" "$@" >/dev/null 2>"$TMP/err"
  local rc=$?
  [[ $rc == 2 ]] || fail "$name: exit code $rc, expected 2"
  [[ $(grep -c . "$TMP/err") == "$n" ]] || fail "$name: expected $n lines (one per rank), got: $(cat "$TMP/err")"
  [[ $(sort -u "$TMP/err" | wc -l) == 1 ]] || fail "$name: ranks printed different lines: $(cat "$TMP/err")"
  grep -qF -- "$fragment" "$TMP/err" || fail "$name: stderr lacks '$fragment': $(cat "$TMP/err")"
}

write_random_shard "$TMP/data.bin" 4000
MODEL=(--num-layers 2 --hidden-size 32 --num-attention-heads 2 --seq-length 16 --vocab-size 16384 --threads 1
  --data-path "$TMP/data.bin")

cat >"$TMP/ds.json" <<'JSON'
{ "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2,
  "fp16": { "enabled": true, "initial_scale_power": 12 },
  "zero_optimization": { "stage": 3, "reduce_bucket_size": 20000, "overlap_comm": true } }
JSON
out=$(run_mpi 4 "${MODEL[@]}" --deepspeed_config "$TMP/ds.json" --ranks-per-node 2 --train-iters 3 \
  --metrics-file "$TMP/metrics.jsonl" 2>&1) || fail "4-rank run failed: $out"
grep -qF "2 nodes x 2 ranks per node (simulated)), ZeRO stage 3, fp16" <<<"$out" || fail "banner: $out"
grep -q "micro 2 x accumulation 2 x 4 data-parallel ranks = global 16" <<<"$out" || fail "batch banner: $out"
grep -q "compute weights .* ZeRO formula 2P/W" <<<"$out" || fail "memory table: $out"
[[ $(wc -l <"$TMP/metrics.jsonl") == 3 ]] || fail "metrics lines: $(cat "$TMP/metrics.jsonl")"
for key in '"step":3' '"loss":' '"lr":' '"loss_scale":4096' '"grad_norm":' '"skipped":false' '"skipped_total":0' \
  '"ms":' '"tokens_per_s":' '"mfu":' '"bytes_intra_node":' '"bytes_inter_node":' '"bytes_by_phase":{"param_gather_fwd":{"intra":' \
  '"grad_reduce":{"intra":' '"comm_wait_ms":{"param_gather_fwd":'; do
  tail -1 "$TMP/metrics.jsonl" | grep -qF -- "$key" || fail "metrics lack $key: $(tail -1 "$TMP/metrics.jsonl")"
done

expect_all_ranks_error "ranks per node" 4 "--ranks-per-node 3 does not divide the world size 4" \
  "${MODEL[@]}" --ranks-per-node 3
expect_all_ranks_error "stage" 4 "--zero-stage is 4; ZeRO stages are 0, 1, 2 and 3" "${MODEL[@]}" --zero-stage 4
expect_all_ranks_error "batch rule" 4 "global batch 10 is not divisible by micro-batch 3 x world size 4" \
  "${MODEL[@]}" --micro-batch-size 3 --global-batch-size 10
echo '{"train_batch_size": 32, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2}' >"$TMP/bad.json"
expect_all_ranks_error "JSON batch rule" 4 "global batch 32 != micro-batch 2 x accumulation steps 2 x world size 4" \
  "${MODEL[@]}" --deepspeed_config "$TMP/bad.json"
echo '{"zero_optimization": {"stage": 7}}' >"$TMP/stage.json"
expect_all_ranks_error "JSON stage" 2 "zero_optimization.stage must be an integer in [0, 3], got 7" \
  "${MODEL[@]}" --deepspeed_config "$TMP/stage.json"
echo '{"fp16": {"enabled": true,}}' >"$TMP/syntax.json"
expect_all_ranks_error "malformed JSON" 2 "$TMP/syntax.json: malformed JSON at line 1" \
  "${MODEL[@]}" --deepspeed_config "$TMP/syntax.json"

echo '{"zero_optimization": {"stage": 3, "zero_hpz_partition_size": 3}}' >"$TMP/hpz.json"
expect_all_ranks_error "hpZ size" 4 "zero_hpz_partition_size 3 does not divide the 2 ranks per node" \
  "${MODEL[@]}" --deepspeed_config "$TMP/hpz.json" --ranks-per-node 2
echo '{"zero_optimization": {"stage": 2, "zero_quantized_weights": true}}' >"$TMP/qwz.json"
expect_all_ranks_error "ZeRO++ without stage 3" 4 "needs ZeRO stage 3, but the stage is 2" \
  "${MODEL[@]}" --deepspeed_config "$TMP/qwz.json"
echo '{"zero_optimization": {"stage": 3, "zero_quantized_gradients": true, "zeropp_gradient_block_size": 100}}' \
  >"$TMP/block.json"
expect_all_ranks_error "block size" 4 "zeropp_gradient_block_size is 100; a quantization block must be a positive multiple of 8" \
  "${MODEL[@]}" --deepspeed_config "$TMP/block.json" --ranks-per-node 2
# qgZ's own options: LoCo without qgZ, err_beta and reset_T out of range, intra-node bits other than 4 or 8.
qgz_error() {  # name fragment extra-json
  echo "{\"zero_optimization\": {\"stage\": 3, $3}}" >"$TMP/qgz.json"
  expect_all_ranks_error "$1" 4 "$2" "${MODEL[@]}" --deepspeed_config "$TMP/qgz.json" --ranks-per-node 2
}
qgz_error "LoCo without qgZ" "zeropp_loco_param is error feedback for qgZ, but zero_quantized_gradients is off; set zero_quantized_gradients to true or remove zeropp_loco_param" \
  '"zeropp_loco_param": {}'
qgz_error "err_beta 1" "zeropp_loco_param.err_beta is 1; it must be in [0, 1)" \
  '"zero_quantized_gradients": true, "zeropp_loco_param": {"err_beta": 1.0}'
qgz_error "err_beta -0.5" "zeropp_loco_param.err_beta is -0.5; it must be in [0, 1)" \
  '"zero_quantized_gradients": true, "zeropp_loco_param": {"err_beta": -0.5}'
qgz_error "reset_T 0" "zeropp_loco_param.reset_T is 0; it must be at least 1" \
  '"zero_quantized_gradients": true, "zeropp_loco_param": {"reset_T": 0}'
qgz_error "intra-node bits 6" "zeropp_intra_node_gradient_bits is 6; it must be 4 or 8 (default 4)" \
  '"zero_quantized_gradients": true, "zeropp_intra_node_gradient_bits": 6'

if ((failures)); then
  echo "$failures check(s) failed" >&2
  exit 1
fi
echo "all gpt_train MPI checks passed"
