#!/usr/bin/env bash
# gpt_train under a real scheduler: scripts/slurm makes a Slurm cluster of 2 emulated nodes (munged, slurmctld,
# a slurmd in each network namespace of scripts/cluster) and the batch scripts of examples/slurm run on it:
#  1. zeropp_mpiexec.sbatch (mpiexec inside the allocation) trains ZeRO++ (qwZ + hpZ + qgZ) on 2 nodes x 2
#     ranks with the losses of `mpiexec -n 4 --ranks-per-node 2` on this machine, bit for bit; the nodes come
#     from the launcher (the banner says 2 nodes x 2 ranks per node, not simulated); its metrics show
#     cross-node bytes and the links carried at least that many;
#  2. zeropp_srun.sbatch (srun --mpi=pmi2) with --exit-duration-in-mins at about half the run: the job saves,
#     requeues itself and finishes with the uninterrupted run's losses, every step of every start;
#  3. the same with the batch node failing mid-run (every process in its namespace killed): Slurm marks it
#     DOWN, requeues the job (sbatch --requeue), and once the node is back the job resumes from its latest
#     checkpoint and finishes with the same losses;
#  4. --ranks-per-node 4 on nodes of 2 ranks is refused with both numbers;
#  5. scripts/slurm down leaves no daemon, namespace, /etc/hosts line or state.
# Without root and network namespaces it checks nothing and prints "SKIPPED (all checks): <reason>".
#
# Args: path of gpt_train, path of scripts/slurm (scripts/cluster and cluster-launch beside it), the folder
# holding examples/slurm, path of tests/train/test_lib.sh.
set -uo pipefail
TRAIN=$(realpath "$1")
SLURM=$(realpath "$2")
REPO=$(realpath "$3")
source "$4" # TMP, fail, write_random_shard
NAME="s$$"
NAME=${NAME:0:8}
sl() { "$SLURM" --name "$NAME" "$@"; }
STATE=${GPT_SLURM_STATE_DIR:-/run/gpt-slurm}/$NAME

# --- the cluster, or the reason there is none ----------------------------------------------------------------
up_out=$(sl up --nodes 2 --cpus-per-node 2 2>&1)
up_rc=$?
if ((up_rc == 2)); then
  echo "SKIPPED (all checks): $(head -1 <<<"$up_out")"
  exit 0
fi
trap 'sl down >/dev/null 2>&1' EXIT
((up_rc == 0)) || {
  echo "FAIL: scripts/slurm up exited $up_rc: $up_out" >&2
  exit 1
}
eval "$(sl env)"

# --- inputs ------------------------------------------------------------------------------------------------------
write_random_shard "$TMP/tokens.bin" 20000
cat >"$TMP/zeropp.json" <<'JSON'
{"fp16": {"enabled": true, "initial_scale_power": 12},
 "zero_optimization": {"stage": 3, "zero_quantized_weights": true, "zero_hpz_partition_size": 2,
                       "zero_quantized_gradients": true}}
JSON
ITERS=60
# Every flag the batch scripts set, overridden: the reference run below then trains exactly the same model.
ARGS=(--num-layers 2 --hidden-size 128 --num-attention-heads 4 --seq-length 64 --vocab-size 16384
  --micro-batch-size 1 --fp16 --train-iters "$ITERS" --lr 6e-4 --min-lr 6e-5 --lr-decay-style cosine
  --lr-warmup-iters 5 --data-path "$TMP/tokens.bin" --split 100,0,0 --log-interval 10 --threads 1
  --deepspeed_config "$TMP/zeropp.json" --save-interval 5)
for script in zeropp_mpiexec zeropp_srun; do
  for flag in $(sed -n '/train_and_requeue/,$p' "$REPO/examples/slurm/$script.sbatch" | grep -o -- ' --[a-z][a-z0-9_-]*' | sort -u); do
    case $flag in --save | --load | --metrics-file | --mpi | --kill-on-bad-exit) continue ;; esac
    [[ " ${ARGS[*]} " == *" $flag "* ]] || fail "examples/slurm/$script.sbatch sets $flag, which this test does not override"
  done
done

losses() { grep -o '"step":[0-9]*,"loss":[-0-9.e]*' "$1" | sort -u; }
job_field() { scontrol show job "$1" 2>/dev/null | grep -o "$2=[^ ]*" | head -1 | cut -d= -f2; }
wait_job_done() { # JOB SECONDS: waits until the job leaves the queue's running and pending states
  local state i
  for i in $(seq $(($2 * 2))); do
    state=$(job_field "$1" JobState)
    [[ $state == COMPLETED || $state == FAILED || $state == CANCELLED || $state == TIMEOUT || $state == NODE_FAIL ]] && return 0
    sleep 0.5
  done
  return 1
}
submit() { # SCRIPT RUN_DIR [FLAG...]: prints the job id
  local script=$1 run=$2
  shift 2
  GPT_REPO=$REPO GPT_TRAIN=$TRAIN GPT_RUN_DIR=$run sbatch --parsable -o "$run.out" \
    "$REPO/examples/slurm/$script.sbatch" "${ARGS[@]}" --metrics-file "$run.jsonl" "$@"
}
check_losses() { # WHAT RUN_DIR
  [[ $(losses "$2.jsonl" | wc -l) == "$ITERS" ]] || fail "$1: expected $ITERS distinct steps, got $(losses "$2.jsonl" | wc -l)"
  diff <(losses "$TMP/ref.jsonl") <(losses "$2.jsonl") >"$TMP/diff" ||
    fail "$1: losses differ from mpiexec -n 4 --ranks-per-node 2: $(head -4 "$TMP/diff")"
}

# --- the reference: 4 ranks on this machine as 2 simulated nodes ---------------------------------------------
start=$(date +%s.%N)
timeout --signal=KILL 300 mpiexec -n 4 "$TRAIN" "${ARGS[@]}" --ranks-per-node 2 --metrics-file "$TMP/ref.jsonl" \
  >"$TMP/ref.log" 2>&1 || fail "reference run failed: $(tail -3 "$TMP/ref.log")"
ref_seconds=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')

# --- 1. mpiexec inside the allocation --------------------------------------------------------------------------
links_before=$(GPT_CLUSTER_NAME=$NAME "$(dirname "$SLURM")/cluster" bytes | awk '$1 == "total" { print $2 }')
job=$(submit zeropp_mpiexec "$TMP/a")
wait_job_done "$job" 300 || fail "mpiexec job $job still $(job_field "$job" JobState) after 300 s"
links_after=$(GPT_CLUSTER_NAME=$NAME "$(dirname "$SLURM")/cluster" bytes | awk '$1 == "total" { print $2 }')
[[ $(job_field "$job" JobState) == COMPLETED ]] || fail "mpiexec job: $(job_field "$job" JobState): $(tail -5 "$TMP/a.out")"
grep -q "training complete ($ITERS steps)" "$TMP/a.out" || fail "mpiexec job: no completion line: $(tail -3 "$TMP/a.out")"
grep -q "world 4 ranks (2 nodes x 2 ranks per node)" "$TMP/a.out" ||
  fail "mpiexec job: the nodes did not come from the launcher: $(grep 'world ' "$TMP/a.out")"
check_losses "mpiexec job" "$TMP/a"
meter=$(grep -o '"bytes_inter_node":[0-9]*' "$TMP/a.jsonl" | awk -F: '{ s += $2 } END { printf "%.0f\n", s }')
((meter > 0)) || fail "mpiexec job: no cross-node bytes in the metrics"
((links_after - links_before >= meter)) ||
  fail "mpiexec job: the links carried $((links_after - links_before)) B, fewer than the meter's $meter cross-node bytes"
echo "mpiexec job: $ITERS steps, $meter cross-node bytes metered, $((links_after - links_before)) B on the links (at ${SECONDS} s)"

# --- 2. srun, --exit-duration-in-mins: stops, requeues itself, resumes -----------------------------------------
# The reference run's time (start-up included, at least 2 s): under Slurm, with TCP between the nodes, the
# steps are slower, so the first start stops part-way.
minutes=$(awk -v s="$ref_seconds" 'BEGIN { printf "%g", (s < 2 ? 2 : s) / 60 }') # as gpt_train prints it
job=$(submit zeropp_srun "$TMP/b" --exit-duration-in-mins "$minutes")
wait_job_done "$job" 400 || fail "exit-duration job $job still $(job_field "$job" JobState) after 400 s"
[[ $(job_field "$job" JobState) == COMPLETED ]] || fail "exit-duration job: $(job_field "$job" JobState): $(tail -5 "$TMP/b.out")"
restarts=$(job_field "$job" Restarts)
((restarts >= 1)) || fail "exit-duration job: never requeued (Restarts=$restarts): $(grep -E '^job|stopping' "$TMP/b.out")"
grep -q "stopping after step [0-9]* (--exit-duration-in-mins $minutes" "$TMP/b.out" ||
  fail "exit-duration job: no stop line: $(grep -E '^job|stopping' "$TMP/b.out")"
grep -q "resuming after step" "$TMP/b.out" || fail "exit-duration job: no resume: $(grep -E '^job|loaded' "$TMP/b.out")"
check_losses "exit-duration job" "$TMP/b"
echo "exit-duration job: $restarts requeue(s): $(grep -o 'stopping after step [0-9]*' "$TMP/b.out" | tr '\n' ',') (at ${SECONDS} s)"

# --- 3. the batch node fails mid-run: Slurm requeues the job, it resumes -----------------------------------------
job=$(submit zeropp_mpiexec "$TMP/c")
saved_step() { # the step of the newest checkpoint, 0 before the first
  local step
  step=$(sed -n 's/^global_step//p' "$TMP/c/checkpoints/latest" 2>/dev/null)
  echo "${step:-0}"
}
for _ in $(seq 600); do
  (($(saved_step) >= 10)) && break
  sleep 0.05
done
(($(saved_step) >= 10)) || fail "node failure: no checkpoint of step 10 or later after 30 s"
batch_node=$(job_field "$job" BatchHost)
sl fail "$batch_node" >/dev/null
echo "node failure: $batch_node killed after checkpoint $(saved_step) (at ${SECONDS} s)"
(($(saved_step) < ITERS)) || fail "node failure: the job finished before $batch_node failed"
for _ in $(seq 120); do
  (($(job_field "$job" Restarts) >= 1)) && break
  sleep 0.5
done
(($(job_field "$job" Restarts) >= 1)) ||
  fail "node failure: job not requeued 60 s after $batch_node failed ($(job_field "$job" JobState), $(sinfo -h -N -o '%N %T' | tr '\n' ' '))"
echo "node failure: job requeued (at ${SECONDS} s)"
sl revive "$batch_node" >/dev/null || fail "node failure: $batch_node did not come back"
wait_job_done "$job" 300 || fail "node failure: job $job still $(job_field "$job" JobState) 300 s after the node came back"
[[ $(job_field "$job" JobState) == COMPLETED ]] || fail "node failure: job $(job_field "$job" JobState): $(tail -5 "$TMP/c.out")"
grep -q "resuming after step" "$TMP/c.out" || fail "node failure: no resume: $(grep -E '^job|loaded' "$TMP/c.out")"
check_losses "node failure" "$TMP/c"
echo "node failure: $batch_node failed and came back; the job resumed from $(grep -o 'loaded [^ ]*' "$TMP/c.out" | tail -1) (at ${SECONDS} s)"

# --- 4. --ranks-per-node that does not tile the launcher's nodes ---------------------------------------------------
srun --mpi=pmi2 -N 2 --ntasks-per-node 2 "$TRAIN" "${ARGS[@]}" --train-iters 1 --ranks-per-node 4 >"$TMP/rpn.log" 2>&1
rc=$?
((rc == 2)) || fail "--ranks-per-node 4 on 2-rank nodes: srun exited $rc, expected 2"
[[ $(grep -c -- "--ranks-per-node 4 does not divide the 2 ranks per node the launcher placed" "$TMP/rpn.log") == 4 ]] ||
  fail "--ranks-per-node 4 on 2-rank nodes: expected the line on 4 ranks: $(head -5 "$TMP/rpn.log")"

# --- 5. down leaves nothing -------------------------------------------------------------------------------------
sl down >/dev/null || fail "scripts/slurm down failed"
trap - EXIT
left=$(pgrep -af -- "$STATE/" || true)
[[ -z $left ]] || fail "down left processes: $left"
[[ -z $(ip netns list 2>/dev/null | grep "^$NAME-") ]] || fail "down left namespaces: $(ip netns list | grep "^$NAME-")"
! grep -q "# gpt-slurm $NAME\$\|# gpt-cluster $NAME\$" /etc/hosts || fail "down left /etc/hosts lines"
[[ ! -e $STATE ]] || fail "down left $STATE"

if ((failures)); then
  echo "$failures check(s) failed" >&2
  exit 1
fi
echo "all Slurm checks passed"
