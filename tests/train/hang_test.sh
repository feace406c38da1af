#!/usr/bin/env bash
# No hang: on 4 ranks (2 simulated nodes x 2), rank 2 stops before step 3 (GPT_FAULT=hang:3:2); with
# --comm-timeout 20 the ranks that wait for it name the stalled collective, its phase and unit and the rank they
# wait for, and abort the whole job, which exits non-zero within 40 s. --comm-timeout and
# --distributed-timeout-minutes together are refused (they set the same timeout), and so is a GPT_FAULT this
# build does not inject.
# Arg: path of gpt_train.
set -uo pipefail
TRAIN=$1
source "$(dirname "$0")/test_lib.sh"
write_random_shard "$TMP/data.bin" 4000
ARGS=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --vocab-size 16384 --seq-length 32
  --micro-batch-size 2 --threads 1 --zero-stage 3 --ranks-per-node 2 --data-path "$TMP/data.bin" --train-iters 6)
start=$SECONDS
GPT_FAULT=hang:3:2 timeout --signal=KILL 120 mpiexec -n 4 "$TRAIN" "${ARGS[@]}" --comm-timeout 20 \
  >/dev/null 2>"$TMP/err"
rc=$? took=$((SECONDS - start))
[[ $rc != 0 && $rc != 137 ]] || fail "the job did not end by itself: exit code $rc"
((took < 40)) || fail "the job took $took s to end (timeout 20 s)"
grep -q "GPT_FAULT: rank 2 hangs before step 3" "$TMP/err" || fail "the fault did not fire: $(cat "$TMP/err")"
grep -Eq "comm: rank [0-9]: no progress for 20 s in [a-z_]+ \([a-z_]+, .+\) over 4 ranks: waiting to (receive from|send to) rank [0-9]; aborting the job" "$TMP/err" ||
  fail "no watchdog line naming the collective and the rank: $(cat "$TMP/err")"

timeout 60 mpiexec -n 1 "$TRAIN" "${ARGS[@]}" --ranks-per-node 1 --comm-timeout 5 --distributed-timeout-minutes 1 \
  >/dev/null 2>"$TMP/both"
rc=$?
[[ $rc == 2 ]] && grep -q "give one of them" "$TMP/both" || fail "both timeouts: exit $rc: $(cat "$TMP/both")"
# A GPT_FAULT this build does not know is refused in one line, not ignored.
GPT_FAULT=hang:3 timeout 60 mpiexec -n 1 "$TRAIN" "${ARGS[@]}" --ranks-per-node 1 >/dev/null 2>"$TMP/bogus"
rc=$?
[[ $rc == 2 ]] && grep -q "GPT_FAULT=hang:3 is not a fault this build injects" "$TMP/bogus" ||
  fail "unknown fault: exit $rc: $(cat "$TMP/bogus")"
((failures == 0)) && echo "a hung rank ends the job in $took s: $(grep -m1 'no progress' "$TMP/err")"
exit $((failures > 0))
