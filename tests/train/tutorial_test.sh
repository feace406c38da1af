#!/usr/bin/env bash
# The DeepSpeed ZeRO++ tutorial's command line, with the model scaled down by its flags and its JSON with
# zero_hpz_partition_size set to 2, trains under mpiexec -n 4 on 2 simulated nodes of 2 ranks.
# Args: path of gpt_train, path of examples/ds_zeropp_config.json.
set -uo pipefail
TRAIN=$1 CONFIG=$2
source "$(dirname "$0")/test_lib.sh"
write_random_shard "$TMP/data.bin" 8000
sed 's/"zero_hpz_partition_size": 16/"zero_hpz_partition_size": 2/' "$CONFIG" >"$TMP/ds_zeropp_config.json"
grep -q '"zero_hpz_partition_size": 2' "$TMP/ds_zeropp_config.json" || { echo "FAIL: could not set hpZ to 2"; exit 1; }
out=$(timeout --signal=KILL 120 mpiexec -n 4 "$TRAIN" \
  --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --num-layers 4 --hidden-size 256 \
  --seq-length 64 --num-attention-heads 8 --batch-size 1 --zero-stage 3 \
  --deepspeed_config "$TMP/ds_zeropp_config.json" --deepspeed-activation-checkpointing --fp16 --checkpoint-activations \
  --deepspeed --train-iters 3 --vocab-size 16384 --data-path "$TMP/data.bin" --ranks-per-node 2 --threads 1 2>&1)
rc=$?
echo "$out"
check() { grep -qF -- "$1" <<<"$out" || { echo "FAIL: output lacks '$1'"; failures=$((failures + 1)); }; }
[[ $rc == 0 ]] || { echo "FAIL: exit code $rc"; failures=$((failures + 1)); }
check "2 nodes x 2 ranks per node (simulated)), ZeRO stage 3, fp16"
check "ZeRO++: qwZ on (int8, block 2048), hpZ on (h = 2), qgZ on (int4 intra-node, int4 cross-node, block 512, LoCo error feedback off)"
check "activation recomputation full (uniform, 1 layer)"
check "zero_optimization.reduce_scatter false accepted without effect"
check "step     3/3 | loss"
((failures == 0)) && echo "tutorial command trains"
exit $((failures > 0))
