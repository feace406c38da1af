#!/usr/bin/env bash
# Checkpoints end to end with gpt_train on 4 ranks (2 simulated nodes x 2):
#  - exact resume: a run killed with SIGKILL after a checkpoint and resumed with --load logs the same loss for
#    every later step as an uninterrupted run, bit for bit (the metrics file's full-precision losses), with
#    ZeRO-3 and with ZeRO++ (qwZ + hpZ + qgZ with LoCo's error feedback, whose kept errors the checkpoint
#    carries; reset_T 7 puts resets on both sides of the resume); at another world size they start from zero
#    and the start-up output says so;
#  - a crash injected at each point of a save (GPT_CHECKPOINT_FAULT, the old spelling of GPT_FAULT=crash_after)
#    leaves a loadable checkpoint;
#  - a shard write failing on one rank (GPT_FAULT=save_fail) stops every rank with one message and loses nothing;
#  - a different global batch on --load stops with both values and the flag to change;
#  - --keep-checkpoints prunes old checkpoints;
#  - the restart of a job: an empty --load starts fresh, --exit-duration-in-mins and SIGUSR1 save and stop,
#    and the three starts of one command together log the uninterrupted run's losses.
# Arg: path of gpt_train.
set -uo pipefail
TRAIN=$1
source "$(dirname "$0")/test_lib.sh"
write_random_shard "$TMP/data.bin" 20000
cat >"$TMP/zeropp.json" <<'JSON'
{"zero_optimization": {"stage": 3, "reduce_bucket_size": 20000, "zero_quantized_weights": true,
 "zero_hpz_partition_size": 2, "zero_quantized_gradients": true, "zeropp_loco_param": {"reset_T": 7}}}
JSON
echo '{"zero_optimization": {"stage": 3, "reduce_bucket_size": 20000}}' >"$TMP/zero3.json"
SHAPE=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --vocab-size 16384 --threads 1
  --global-batch-size 8 --fp16 --data-path "$TMP/data.bin")
MODEL=("${SHAPE[@]}" --micro-batch-size 2 --ranks-per-node 2)
run() { timeout --signal=KILL 120 mpiexec -n 4 "$TRAIN" "${MODEL[@]}" "$@"; }
losses() { grep -o '"step":[0-9]*,"loss":[-0-9.e]*' "$1" | sort -u; }

for config in zero3 zeropp; do
  dir="$TMP/ckpt_$config"
  run --deepspeed_config "$TMP/$config.json" --train-iters 40 --metrics-file "$TMP/full_$config.jsonl" >/dev/null 2>&1 ||
    fail "$config: the uninterrupted run failed"
  # The interrupted run: SIGKILL the whole job as soon as the step-10 checkpoint is complete.
  setsid bash -c "exec timeout --signal=KILL 120 mpiexec -n 4 '$TRAIN' ${MODEL[*]} --deepspeed_config '$TMP/$config.json' \
    --train-iters 40 --save '$dir' --save-interval 10 --metrics-file '$TMP/resumed_$config.jsonl'" >/dev/null 2>&1 &
  job=$!
  for _ in $(seq 1 600); do
    [[ -f "$dir/latest" ]] && break
    sleep 0.05
  done
  kill -KILL -- "-$job" 2>/dev/null
  wait "$job" 2>/dev/null
  [[ "$(cat "$dir/latest" 2>/dev/null)" == global_step* ]] || fail "$config: no checkpoint before the kill"
  last=$(grep -c '"step"' "$TMP/resumed_$config.jsonl")
  ((last < 40)) || fail "$config: the run finished before it was killed"
  run --deepspeed_config "$TMP/$config.json" --train-iters 40 --load "$dir" \
    --metrics-file "$TMP/resumed_$config.jsonl" >"$TMP/resume.log" 2>&1 || fail "$config: resume failed: $(cat "$TMP/resume.log")"
  grep -q "resuming after step 10" "$TMP/resume.log" || fail "$config: did not resume from step 10: $(cat "$TMP/resume.log")"
  # Every step's loss, from either part of the interrupted run, equals the uninterrupted run's, bit for bit.
  if ! diff <(losses "$TMP/full_$config.jsonl") <(losses "$TMP/resumed_$config.jsonl") >"$TMP/diff"; then
    fail "$config: resumed losses differ: $(head -5 "$TMP/diff")"
  fi
  [[ $(losses "$TMP/resumed_$config.jsonl" | wc -l) == 40 ]] || fail "$config: expected 40 distinct steps"
  ! grep -q "start from zero" "$TMP/resume.log" || fail "$config: kept errors not restored: $(cat "$TMP/resume.log")"
done

# LoCo's kept errors saved at 4 ranks, loaded at 8 (2 nodes of 4): they start from zero, and the run says why.
timeout --signal=KILL 120 mpiexec -n 8 "$TRAIN" "${SHAPE[@]}" --micro-batch-size 1 --ranks-per-node 4 \
  --deepspeed_config "$TMP/zeropp.json" --train-iters 12 --load "$TMP/ckpt_zeropp" >"$TMP/w8.log" 2>&1 ||
  fail "LoCo at another world size: the run failed: $(tail -3 "$TMP/w8.log")"
grep -q "note: LoCo's kept errors start from zero: the checkpoint was saved at 4 ranks, this run has 8" "$TMP/w8.log" ||
  fail "LoCo at another world size: no note: $(cat "$TMP/w8.log")"

# A crash at each point of a save: the next --load still finds a complete checkpoint.
for point in shards manifest rename latest; do
  dir="$TMP/crash_$point"
  run --deepspeed_config "$TMP/zero3.json" --train-iters 2 --save "$dir" >/dev/null 2>&1 || fail "$point: first save failed"
  # Both spellings: the old variable for the first two points, GPT_FAULT for the others.
  if [[ $point == shards || $point == manifest ]]; then
    export GPT_CHECKPOINT_FAULT=$point
  else
    export GPT_FAULT=crash_after:$point
  fi
  run --deepspeed_config "$TMP/zero3.json" --train-iters 4 --load "$dir" --save "$dir" >/dev/null 2>"$TMP/crash.err"
  unset GPT_CHECKPOINT_FAULT GPT_FAULT
  grep -q "exiting after '$point'" "$TMP/crash.err" || fail "$point: the fault did not fire: $(cat "$TMP/crash.err")"
  expected=global_step2
  [[ $point == latest ]] && expected=global_step4
  [[ "$(cat "$dir/latest")" == "$expected" ]] || fail "$point: latest is $(cat "$dir/latest"), expected $expected"
  run --deepspeed_config "$TMP/zero3.json" --train-iters 5 --load "$dir" >"$TMP/after.log" 2>&1 ||
    fail "$point: the checkpoint left behind does not load: $(tail -2 "$TMP/after.log")"
  grep -q "loaded .*$expected" "$TMP/after.log" || fail "$point: loaded the wrong checkpoint: $(grep loaded "$TMP/after.log")"
done

# A shard write that fails on one rank (GPT_FAULT=save_fail:1): every rank stops with exit code 2 and the same
# message naming rank 1, the partial checkpoint is removed, latest still names the previous one, and --load
# from it resumes bit for bit.
dir="$TMP/save_fail"
run --deepspeed_config "$TMP/zero3.json" --train-iters 4 --metrics-file "$TMP/sf_full.jsonl" >/dev/null 2>&1 ||
  fail "save_fail: the uninterrupted run failed"
run --deepspeed_config "$TMP/zero3.json" --train-iters 4 --save "$dir" --save-interval 2 --exit-interval 2 \
  >/dev/null 2>&1 || fail "save_fail: the first save failed"
GPT_FAULT=save_fail:1 run --deepspeed_config "$TMP/zero3.json" --train-iters 4 --load "$dir" --save "$dir" \
  --save-interval 2 >/dev/null 2>"$TMP/sf.err"
rc=$?
[[ $rc == 2 ]] || fail "save_fail: exit code $rc: $(cat "$TMP/sf.err")"
[[ $(grep -c "checkpoint global_step4 was not saved: rank 1: .*GPT_FAULT save_fail" "$TMP/sf.err") == 4 ]] ||
  fail "save_fail: expected the message on 4 ranks: $(cat "$TMP/sf.err")"
[[ "$(cat "$dir/latest")" == global_step2 ]] || fail "save_fail: latest is $(cat "$dir/latest")"
[[ ! -e "$dir/global_step4" && ! -e "$dir/global_step4.tmp" ]] || fail "save_fail: a partial checkpoint is left: $(ls "$dir")"
run --deepspeed_config "$TMP/zero3.json" --train-iters 4 --load "$dir" --metrics-file "$TMP/sf_resumed.jsonl" \
  >"$TMP/sf.log" 2>&1 || fail "save_fail: resume failed: $(tail -2 "$TMP/sf.log")"
diff <(losses "$TMP/sf_full.jsonl" | grep -E '"step":(3|4),') <(losses "$TMP/sf_resumed.jsonl") >"$TMP/diff" ||
  fail "save_fail: resumed losses differ: $(head -5 "$TMP/diff")"

# A different global batch: refused on every rank with both values and the flag.
run --deepspeed_config "$TMP/zero3.json" --train-iters 6 --load "$TMP/crash_latest" --global-batch-size 16 \
  >/dev/null 2>"$TMP/g.err"
rc=$?
[[ $rc == 2 ]] || fail "global batch change: exit code $rc"
[[ $(grep -c "global batch of 8 sequences, this run has 16" "$TMP/g.err") == 4 ]] ||
  fail "global batch change: expected the message on 4 ranks: $(cat "$TMP/g.err")"
grep -q -- "--global-batch-size 8" "$TMP/g.err" || fail "global batch change: the fix is not named"

# --keep-checkpoints 2 keeps the newest two.
run --deepspeed_config "$TMP/zero3.json" --train-iters 5 --save "$TMP/keep" --save-interval 1 --keep-checkpoints 2 \
  >/dev/null 2>&1 || fail "keep: run failed"
[[ "$(ls "$TMP/keep" | grep -c '^global_step')" == 2 && -d "$TMP/keep/global_step5" && -d "$TMP/keep/global_step4" ]] ||
  fail "keep: $(ls "$TMP/keep")"

# The same command for the first start and every restart (a Slurm job that requeues itself): --load of a folder
# with no checkpoint yet starts fresh with one line; --exit-duration-in-mins and SIGUSR1 each save and stop at
# a step's end with exit code 0, naming the reason; the next start resumes from that checkpoint.
dir="$TMP/requeue"
start() { run --deepspeed_config "$TMP/zero3.json" --train-iters 40 --save "$dir" --load "$dir" "$@"; }
start --exit-duration-in-mins 1e-6 --metrics-file "$TMP/rq.jsonl" >"$TMP/rq1.log" 2>&1 ||
  fail "exit duration: exit code $?: $(tail -3 "$TMP/rq1.log")"
grep -q "no checkpoint in $dir yet (no latest): starting from step 0" "$TMP/rq1.log" ||
  fail "empty --load: no fresh-start line: $(head -3 "$TMP/rq1.log")"
grep -q "stopping after step 1 (--exit-duration-in-mins 1e-06: " "$TMP/rq1.log" ||
  fail "exit duration: no stop after step 1: $(grep -E 'stopping|saved' "$TMP/rq1.log")"
[[ "$(cat "$dir/latest" 2>/dev/null)" == global_step1 ]] || fail "exit duration: latest is $(cat "$dir/latest" 2>/dev/null)"
setsid bash -c "exec timeout --signal=KILL 120 mpiexec -n 4 '$TRAIN' ${MODEL[*]} --deepspeed_config '$TMP/zero3.json' \
  --train-iters 40 --save '$dir' --load '$dir' --metrics-file '$TMP/rq.jsonl'" >"$TMP/rq2.log" 2>&1 &
job=$!
for _ in $(seq 1 600); do
  (($(grep -c '"step"' "$TMP/rq.jsonl") >= 4)) && break
  sleep 0.05
done
pkill -USR1 -f -- "^mpiexec .*--metrics-file $TMP/rq.jsonl" # mpiexec forwards it to every rank
wait "$job"
rc=$?
((rc == 0)) || fail "SIGUSR1: exit code $rc: $(tail -3 "$TMP/rq2.log")"
grep -q "loaded .*global_step1" "$TMP/rq2.log" || fail "SIGUSR1 run: did not resume from step 1: $(head -5 "$TMP/rq2.log")"
stopped=$(sed -n 's/^gpt_train: stopping after step \([0-9]*\) (SIGUSR1)$/\1/p' "$TMP/rq2.log")
[[ -n $stopped && $stopped -lt 40 && "$(cat "$dir/latest")" == "global_step$stopped" ]] ||
  fail "SIGUSR1: expected a stop and a save before step 40: $(grep -E 'stopping|saved' "$TMP/rq2.log"), latest $(cat "$dir/latest")"
start --metrics-file "$TMP/rq.jsonl" >"$TMP/rq3.log" 2>&1 || fail "requeue: the last start failed: $(tail -3 "$TMP/rq3.log")"
diff <(losses "$TMP/full_zero3.jsonl") <(losses "$TMP/rq.jsonl") >"$TMP/diff" ||
  fail "requeue: losses differ from the uninterrupted run: $(head -5 "$TMP/diff")"

if ((failures)); then
  echo "$failures check(s) failed" >&2
  exit 1
fi
echo "all checkpoint checks passed"
