#!/usr/bin/env bash
# ZeRO-Infinity end to end with gpt_train on 4 ranks (2 simulated nodes x 2), the optimizer state and the
# compute weights on NVMe (swap files in the test's temporary folder):
#  - offloaded training logs the same losses as in-memory training, bit for bit;
#  - a run killed with SIGKILL after a checkpoint and resumed with --load logs the same loss for every later
#    step; the killed run's swap folders are reported as stale and removed, never reused as state;
#  - a fresh start over a stale folder reports and removes it; a clean exit leaves nothing under nvme_path;
#  - a bad nvme_path (missing, not a directory, no room for the swap files) or offload below stage 3 stops
#    every rank with one line and exit code 2, leaving nothing behind.
# Arg: path of gpt_train.
set -uo pipefail
TRAIN=$1
source "$(dirname "$0")/test_lib.sh"
write_random_shard "$TMP/data.bin" 20000
SWAP="$TMP/nvme"
mkdir -p "$SWAP"
offload_config() {  # $1: nvme_path, $2: stage
  cat <<JSON
{"zero_optimization": {"stage": ${2:-3}, "reduce_bucket_size": 20000, "sub_group_size": 4096,
 "offload_optimizer": {"device": "nvme", "nvme_path": "$1", "buffer_count": 3},
 "offload_param": {"device": "nvme", "nvme_path": "$1"}},
 "aio": {"block_size": 65536, "queue_depth": 4}}
JSON
}
offload_config "$SWAP" >"$TMP/offload.json"
echo '{"zero_optimization": {"stage": 3, "reduce_bucket_size": 20000}}' >"$TMP/zero3.json"
MODEL=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --vocab-size 16384 --threads 1
  --global-batch-size 8 --fp16 --data-path "$TMP/data.bin" --micro-batch-size 2 --ranks-per-node 2)
run() { timeout --signal=KILL 180 mpiexec -n 4 "$TRAIN" "${MODEL[@]}" "$@"; }
losses() { grep -o '"step":[0-9]*,"loss":[-0-9.e]*' "$1" | sort -u; }
# WHAT STEPS LOSSES_A LOSSES_B (losses' output): the same losses, and STEPS of them (two empty or short logs
# are no match).
same_losses() {
  local n
  n=$(grep -c . <<<"$3")
  [[ "$3" == "$4" ]] || fail "$1: losses differ: $(diff <(echo "$3") <(echo "$4") | head -5)"
  ((n == $2)) || fail "$1: $n steps logged, expected $2"
}
swap_left() { find "$SWAP" -mindepth 1 | head -3; }

# In memory and offloaded: the same losses, bit for bit; nothing left under nvme_path after a clean exit.
run --deepspeed_config "$TMP/zero3.json" --train-iters 20 --metrics-file "$TMP/memory.jsonl" >/dev/null 2>&1 ||
  fail "the in-memory run failed"
run --deepspeed_config "$TMP/offload.json" --train-iters 20 --metrics-file "$TMP/offload.jsonl" >"$TMP/off.log" 2>&1 ||
  fail "the offloaded run failed: $(tail -3 "$TMP/off.log")"
same_losses "offloaded vs in memory" 20 "$(losses "$TMP/memory.jsonl")" "$(losses "$TMP/offload.jsonl")"
[[ -z "$(swap_left)" ]] || fail "a clean exit left swap files behind: $(swap_left)"

# SIGKILL as soon as the step-10 checkpoint is complete, then --load.
dir="$TMP/ckpt"
setsid bash -c "exec timeout --signal=KILL 180 mpiexec -n 4 '$TRAIN' ${MODEL[*]} --deepspeed_config '$TMP/offload.json' \
  --train-iters 20 --save '$dir' --save-interval 10 --metrics-file '$TMP/resumed.jsonl'" >/dev/null 2>&1 &
job=$!
for _ in $(seq 1 1200); do
  [[ -f "$dir/latest" ]] && break
  sleep 0.05
done
kill -KILL -- "-$job" 2>/dev/null
wait "$job" 2>/dev/null
[[ "$(cat "$dir/latest" 2>/dev/null)" == global_step* ]] || fail "no checkpoint before the kill"
(($(grep -c '"step"' "$TMP/resumed.jsonl") < 20)) || fail "the run finished before it was killed"
[[ -n "$(swap_left)" ]] || fail "the killed run left no swap folder (was the state offloaded?)"
run --deepspeed_config "$TMP/offload.json" --train-iters 20 --load "$dir" --metrics-file "$TMP/resumed.jsonl" \
  >"$TMP/resume.log" 2>&1 || fail "resume failed: $(tail -3 "$TMP/resume.log")"
grep -q "resuming after step 10" "$TMP/resume.log" || fail "did not resume from step 10: $(cat "$TMP/resume.log")"
grep -q "removed a stale swap folder" "$TMP/resume.log" || fail "the stale folder was not reported: $(cat "$TMP/resume.log")"
same_losses "resumed vs in memory" 20 "$(losses "$TMP/memory.jsonl")" "$(losses "$TMP/resumed.jsonl")"
[[ -z "$(swap_left)" ]] || fail "the resumed run left swap files behind: $(swap_left)"

# A fresh start over a stale folder: a run killed before any checkpoint leaves its folders; the next start
# with the same --save reports and removes them.
setsid bash -c "exec timeout --signal=KILL 180 mpiexec -n 4 '$TRAIN' ${MODEL[*]} --deepspeed_config '$TMP/offload.json' \
  --train-iters 1000 --save '$TMP/fresh' --save-interval 1000" >/dev/null 2>&1 &
job=$!
for _ in $(seq 1 1200); do
  [[ -n "$(find "$SWAP" -name param.swp 2>/dev/null)" ]] && break
  sleep 0.05
done
sleep 1
kill -KILL -- "-$job" 2>/dev/null
wait "$job" 2>/dev/null
[[ -n "$(swap_left)" ]] || fail "fresh start: the killed run left no swap folder"
run --deepspeed_config "$TMP/offload.json" --train-iters 2 --save "$TMP/fresh" >"$TMP/fresh.log" 2>&1 ||
  fail "fresh start over a stale folder failed: $(tail -3 "$TMP/fresh.log")"
grep -q "removed a stale swap folder" "$TMP/fresh.log" || fail "fresh start: the stale folder was not reported"
[[ -z "$(swap_left)" ]] || fail "fresh start: swap files left behind: $(swap_left)"

# Bad nvme_path: one line on every rank, exit code 2, nothing left behind.
expect_refusal() {  # $1: what, $2: pattern, then the config file
  local what=$1 pattern=$2 config=$3
  run --deepspeed_config "$config" --train-iters 2 >/dev/null 2>"$TMP/bad.err"
  local rc=$?
  [[ $rc == 2 ]] || fail "$what: exit code $rc: $(tail -3 "$TMP/bad.err")"
  [[ $(grep -c "$pattern" "$TMP/bad.err") == 4 ]] || fail "$what: expected the message on 4 ranks: $(cat "$TMP/bad.err")"
}
offload_config "$TMP/missing" >"$TMP/missing.json"
expect_refusal "missing nvme_path" "offload_optimizer.nvme_path.*$TMP/missing" "$TMP/missing.json"
touch "$TMP/a_file"
offload_config "$TMP/a_file" >"$TMP/file.json"
expect_refusal "nvme_path a file" "$TMP/a_file.*not a directory" "$TMP/file.json"
offload_config "$SWAP" 2 >"$TMP/stage2.json"
expect_refusal "stage 2" "needs ZeRO stage 3" "$TMP/stage2.json"
[[ -z "$(swap_left)" ]] || fail "a refused run left swap files behind: $(swap_left)"

# A small tmpfs (where this sandbox lets root mount one): too small for the swap files is refused before
# training; one large enough trains with the same losses. Before Linux 6.6 tmpfs refused O_DIRECT and the run
# must say it fell back to buffered I/O; newer kernels take O_DIRECT there (tests/offload covers buffered I/O).
mkdir -p "$TMP/small" "$TMP/tmpfs"
if mount -t tmpfs -o size=256k tmpfs "$TMP/small" 2>/dev/null; then
  offload_config "$TMP/small" >"$TMP/small.json"
  expect_refusal "too small" "$TMP/small.* free, the swap files need" "$TMP/small.json"
  [[ -z "$(find "$TMP/small" -mindepth 1)" ]] || fail "too small: files left behind"
  umount "$TMP/small"
  mount -t tmpfs -o size=64m tmpfs "$TMP/tmpfs"
  offload_config "$TMP/tmpfs" >"$TMP/tmpfs.json"
  run --deepspeed_config "$TMP/tmpfs.json" --train-iters 3 --metrics-file "$TMP/tmpfs.jsonl" >"$TMP/tmpfs.log" 2>&1 ||
    fail "tmpfs: the run failed: $(tail -3 "$TMP/tmpfs.log")"
  if ! python3 -c 'import os, sys; os.open(sys.argv[1] + "/probe", os.O_CREAT | os.O_RDWR | os.O_DIRECT)' "$TMP/tmpfs" 2>/dev/null; then
    grep -q "does not support O_DIRECT" "$TMP/tmpfs.log" || fail "tmpfs: no note of the buffered fallback"
  fi
  rm -f "$TMP/tmpfs/probe"
  same_losses "tmpfs" 3 "$(losses "$TMP/memory.jsonl" | grep -E '"step":[123],')" "$(losses "$TMP/tmpfs.jsonl")"
  umount "$TMP/tmpfs"
else
  echo "SKIPPED: offload to a tmpfs: cannot mount one here (needs root): the too-small and tmpfs runs"
fi

if ((failures)); then
  echo "$failures check(s) failed" >&2
  exit 1
fi
echo "all offload checks passed"
