#!/bin/bash
# gpt_train --plan with the ZeRO++ tutorial's exact command line and its ds_zeropp_config.json (18B model on
# 4 nodes x 16 V100 32GB): exits 0, prints the plan with "zeropp" as the configured combination and the JSON
# line, and peaks under 200 MB of resident memory (the acceptance bound); at t = 8 x p = 2 x d = 4 the
# pipeline's split, bubble and JSON. A bad rate is exit code 2.
# Usage: gpt_train_plan_test.sh GPT_TRAIN CONFIG_JSON
set -u
gpt_train=$1
config=$2
out=$(mktemp)
rss=$(mktemp)
fail() {
  echo "FAIL: $*" >&2
  cat "$out" >&2
  exit 1
}
args=(--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --num-layers 40 --hidden-size 6144
  --seq-length 512 --num-attention-heads 32 --batch-size 1 --zero-stage 3 --deepspeed_config "$config"
  --deepspeed-activation-checkpointing --fp16 --checkpoint-activations
  --plan --nodes 4 --gpus-per-node 16 --gpu-memory 32GB --intra-node-bandwidth 150GB/s
  --inter-node-bandwidth 100Gb/s --gpu-tflops 125)
if [ -x /usr/bin/time ]; then
  /usr/bin/time -f "%M" -o "$rss" "$gpt_train" "${args[@]}" >"$out" 2>&1 || fail "gpt_train --plan exited $?"
  peak_kb=$(tail -n 1 "$rss")
  echo "peak resident memory of gpt_train --plan: ${peak_kb} KB"
  [ "$peak_kb" -lt 195312 ] || fail "peak resident memory ${peak_kb} KB is not under 200 MB"
else
  "$gpt_train" "${args[@]}" >"$out" 2>&1 || fail "gpt_train --plan exited $?"
  echo "no /usr/bin/time: peak memory not measured"
fi
grep -q '^  \* zeropp ' "$out" || fail "the configured combination zeropp is not marked"
grep -q 'of 32.00 GB: fits' "$out" || fail "the memory verdict is missing"
grep -q '^{"plan":{' "$out" || fail "the JSON line is missing"
grep -q '"configured":"zeropp"' "$out" || fail "the JSON line does not name zeropp"

# The same model at t = 8 x p = 2 x d = 4 (ZeRO stage 1, 16 micro-batches a step): the split, the bubble
# and the pipeline's JSON.
pp_args=(--num-layers 40 --hidden-size 6144 --seq-length 512 --num-attention-heads 32 --batch-size 1 --fp16
  --zero-stage 1 --recompute-activations --tensor-model-parallel-size 8 --pipeline-model-parallel-size 2
  --global-batch-size 64 --plan --nodes 4 --gpus-per-node 16 --gpu-memory 32GB --intra-node-bandwidth 150GB/s
  --inter-node-bandwidth 100Gb/s --gpu-tflops 125)
"$gpt_train" "${pp_args[@]}" >"$out" 2>&1 || fail "gpt_train --plan at p = 2 exited $?"
grep -q 'x d = 4 data-parallel x p = 2 pipeline stages (1F1B, m = 16' "$out" || fail "no t x d x p line"
grep -q 'embedding + layers 0-19' "$out" || fail "no stage split"
grep -q 'bubble      (p - 1)/(v m + p - 1) = 0.059' "$out" || fail "no bubble"
grep -q '"pipeline_parallel":2' "$out" || fail "the JSON line has no pipeline size"

"$gpt_train" "${args[@]}" --inter-node-bandwidth 100Gb >"$out" 2>&1
rc=$?
[ "$rc" -eq 2 ] || fail "a size given as a rate exited $rc, not 2"
grep -q "'100Gb' is a size, not a rate; add /s, for example 100Gb/s" "$out" || fail "wrong message"
echo "PASS"
