#!/usr/bin/env bash
# Table-driven: bad inputs to gpt_train, each under mpiexec -n 2, must stop every rank with the same one-line
# message (checked for a specific fragment) and exit code 2, without hanging.
# Arg: path of gpt_train.
set -uo pipefail
TRAIN=$1
source "$(dirname "$0")/test_lib.sh"

write_zero_shard "$TMP/data.bin" 2000
# --load of a folder with no checkpoint starts fresh (a job's first start); one whose latest names nothing is an error.
mkdir -p "$TMP/dangling"
echo global_step9 >"$TMP/dangling/latest"
echo '{"fp16": {"enabled": true,}}' >"$TMP/malformed.json"
echo '{"fp16": {"enabled": "yes"}}' >"$TMP/type.json"
echo '{"train_batch_size": 30, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2}' >"$TMP/batch.json"
echo '{"zero_optimization": {"stage": 3, "zero_hpz_partition_size": 4}}' >"$TMP/hpz.json"
echo '{"scheduler": {"type": "WarmupDecayLR", "params": {"warmup_num_steps": 10}}}' >"$TMP/sched.json"
echo '{"optimizer": {"type": "SGD"}}' >"$TMP/opt.json"
echo '{"optimizer": {"type": "AdamW", "params": {"betas": [0.9]}}}' >"$TMP/betas.json"
echo '{"zero_optimization": {"stage": 5}}' >"$TMP/stage.json"
echo '[1, 2]' >"$TMP/array.json"
echo '{"zero_optimization": {"stage": 3, "memory_centric_tiling_factor": 0}}' >"$TMP/tile0.json"
echo '{"zero_optimization": {"stage": 3, "memory_centric_tiling_factor": 4}}' >"$TMP/tile4.json"
echo '{"activation_checkpointing": {"cpu_checkpointing": 1}}' >"$TMP/cpu_ckpt.json"
echo '{"zero_optimization": {"stage": 2, "stage3_gather_once_per_step": true}}' >"$TMP/once.json"

M=(--num-layers 2 --hidden-size 32 --num-attention-heads 2 --seq-length 16 --vocab-size 1000 --threads 1)
D=(--data-path "$TMP/data.bin")
# name | expected fragment | arguments (eval'd as words)
CASES=(
  "malformed JSON|$TMP/malformed.json: malformed JSON at line 1|--deepspeed_config $TMP/malformed.json"
  "wrong JSON type|fp16.enabled must be true or false, got \"yes\"|--deepspeed_config $TMP/type.json"
  "JSON not an object|the config must be a JSON object|--deepspeed_config $TMP/array.json"
  "batch sizes disagree|global batch 30 != micro-batch 2 x accumulation steps 2 x world size 2|--deepspeed_config $TMP/batch.json"
  "heads do not divide hidden|--hidden-size 30 is not divisible by --num-attention-heads 4|--hidden-size 30 --num-attention-heads 4"
  "sequence too long|--seq-length 2048 exceeds --max-position-embeddings 1024|--seq-length 2048"
  "missing data path|--data-path is required|NO_DATA"
  "data path matches nothing|$TMP/none_*.bin|--data-path $TMP/none_*.bin"
  "gather once per step below stage 3|stage3_gather_once_per_step keeps stage 3's gathered weights for the step, but the stage is 2|--deepspeed_config $TMP/once.json"
  "hpZ does not divide ranks per node|zero_hpz_partition_size 4 does not divide the 2 ranks per node|--deepspeed_config $TMP/hpz.json --ranks-per-node 2"
  "unknown flag|unknown flag --num-layer; did you mean --num-layers?|--num-layer 2"
  "fewer micro-batches than stages|1 micro-batches per step are fewer than the 2 pipeline stages|--pipeline-model-parallel-size 2"
  "layers do not split into stages|--num-layers 3 does not split into 2 pipeline stages|--pipeline-model-parallel-size 2 --num-layers 3"
  "uneven split does not add up|--num-layers 4 does not split into 2 pipeline stages (4 - 3 (first stage) - 3 (last stage) layers over 0 stages|--pipeline-model-parallel-size 2 --num-layers 4 --decoder-first-pipeline-num-layers 3 --decoder-last-pipeline-num-layers 3"
  "t x p does not divide the world|--tensor-model-parallel-size 2 x --pipeline-model-parallel-size 2 = 4 does not divide the world size 2|--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2"
  "virtual stages do not divide|--num-layers-per-virtual-pipeline-stage 2: 6 layers do not split into chunks of 2 layers for each of 2 stages|--pipeline-model-parallel-size 2 --num-layers 6 --num-layers-per-virtual-pipeline-stage 2"
  "interleaving takes groups of p|the interleaved schedule takes micro-batches in groups of the 2 pipeline stages, got 3|--pipeline-model-parallel-size 2 --num-layers 4 --num-layers-per-virtual-pipeline-stage 1 --micro-batch-size 1 --global-batch-size 3"
  "t does not divide the world|--tensor-model-parallel-size 3 does not divide the world size 2|--tensor-model-parallel-size 3"
  "t does not divide the heads|--tensor-model-parallel-size 2 does not divide --num-attention-heads 1: each rank computes whole heads|--tensor-model-parallel-size 2 --num-attention-heads 1"
  "t does not divide the ranks per node|--tensor-model-parallel-size 2 does not divide --ranks-per-node 1; a tensor-parallel group must stay inside one node (our rule)|--tensor-model-parallel-size 2 --ranks-per-node 1"
  "sequence parallelism and the sequence length|--sequence-parallel splits --seq-length 15 over --tensor-model-parallel-size 2|--tensor-model-parallel-size 2 --sequence-parallel --seq-length 15"
  "tiling with tensor parallelism|memory-centric tiling and tensor parallelism do not combine yet|--tensor-model-parallel-size 2 --tile-factor 2 --hidden-size 64"
  "decay style|--lr-decay-style is 'exponential'; choose constant, linear or cosine|--lr-decay-style exponential"
  "scheduler without total steps|scheduler.params.total_num_steps is required for WarmupDecayLR|--deepspeed_config $TMP/sched.json"
  "unsupported optimizer|optimizer.type must be one of \"Adam|--deepspeed_config $TMP/opt.json"
  "bad betas|optimizer.params.betas must be a pair [beta1, beta2]|--deepspeed_config $TMP/betas.json"
  "stage out of range in JSON|zero_optimization.stage must be an integer in [0, 3], got 5|--deepspeed_config $TMP/stage.json"
  "fp16 and bf16|both fp16 and bf16 are enabled|--fp16 --bf16"
  "non-numeric value|--lr expects a number, got 'fast'|--lr fast"
  "zero layers|--num-layers is 0, outside its range|--num-layers 0"
  "ranks per node|--ranks-per-node 3 does not divide the world size 2|--ranks-per-node 3"
  "bad split|--split 'a,b' must be comma-separated weights|--split a,b"
  "missing init-from file|$TMP/missing.bin|--init-from $TMP/missing.bin"
  "fine-tuning from no checkpoint|$TMP/nockpt: no checkpoint here|--load $TMP/nockpt --finetune"
  "latest names a missing checkpoint|$TMP/dangling/global_step9/manifest.json: cannot read|--load $TMP/dangling"
  "plan memory unit|--gpu-memory|--plan --gpu-memory lots"
  "tile factor does not tile the model|--tile-factor 3: tile factor 3 needs the hidden size to be a multiple of 16 x 3 = 48|--tile-factor 3"
  "tile factor in JSON out of range|zero_optimization.memory_centric_tiling_factor must be an integer in [1, 65536], got 0|--deepspeed_config $TMP/tile0.json"
  "recompute method with selective|--recompute-method applies to --recompute-granularity full; selective recomputation|--recompute-activations --recompute-method uniform"
  "recompute granularity|--recompute-granularity is 'sometimes'; choose full or selective|--recompute-granularity sometimes"
  "distributed checkpoints at t = 1|--distribute-saved-activations partitions checkpointed activations over the tensor-parallel group: it needs --tensor-model-parallel-size > 1|--distribute-saved-activations --checkpoint-activations"
  "recompute layers beyond the model|--recompute-num-layers 3 is outside [1, 2] for --recompute-method uniform with --num-layers 2|--recompute-granularity full --recompute-num-layers 3"
  "activation_checkpointing type|activation_checkpointing.cpu_checkpointing must be true or false, got 1|--deepspeed_config $TMP/cpu_ckpt.json"
  "tile factor in JSON too large for the model|$TMP/tile4.json: zero_optimization.memory_centric_tiling_factor 4: tile factor 4 needs|--deepspeed_config $TMP/tile4.json"
)
for entry in "${CASES[@]}"; do
  IFS='|' read -r name fragment arguments <<<"$entry"
  read -ra args <<<"$arguments"
  data=("${D[@]}")
  if [[ ${args[0]} == NO_DATA ]]; then args=(); data=(); fi
  timeout --signal=KILL 60 mpiexec -n 2 "$TRAIN" "${M[@]}" "${data[@]}" "${args[@]}" >/dev/null 2>"$TMP/err"
  rc=$?
  [[ $rc == 2 ]] || fail "$name: exit code $rc, expected 2 ($(cat "$TMP/err"))"
  [[ $(grep -c . "$TMP/err") == 2 ]] || fail "$name: expected one line per rank, got: $(cat "$TMP/err")"
  [[ $(sort -u "$TMP/err" | wc -l) == 1 ]] || fail "$name: the ranks printed different lines: $(cat "$TMP/err")"
  grep -qF -- "$fragment" "$TMP/err" || fail "$name: stderr lacks '$fragment': $(cat "$TMP/err")"
done
echo "${#CASES[@]} bad inputs checked"
if ((failures)); then
  echo "$failures check(s) failed" >&2
  exit 1
fi
