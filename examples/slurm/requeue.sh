# Sourced by the batch scripts in this folder: runs gpt_train under a launcher, forwards the time-limit warning
# to it, and requeues the job until training is complete. Every run of the job passes the same --save and
# --load folder, so the first start (nothing saved yet: gpt_train starts fresh and says so) and every restart
# use the same command.
#
#   train_and_requeue LAUNCHER_COMMAND... -- GPT_TRAIN_FLAG...
#
# The job's end, each way:
#   - time limit: `#SBATCH --signal=B:USR1@120` sends SIGUSR1 to this shell two minutes ahead; the trap passes
#     it to the launcher, which passes it to every rank (MPICH's mpiexec and srun both forward SIGUSR1);
#     gpt_train saves at the end of the step and exits 0;
#   - --exit-duration-in-mins M: gpt_train itself saves and exits 0 after M minutes (no signal needed);
#   - a node fails: Slurm kills the job and, because of `#SBATCH --requeue`, starts it again.
# After an exit 0 the job is complete when the newest checkpoint is the last step's (DIR/latest names
# global_step<train-iters>); otherwise `scontrol requeue` puts it back in the queue to resume from there.

# The value of the last FLAG among ARGS (gpt_train reads flags left to right, a later one wins).
last_flag_value() { # FLAG ARGS...
  local flag=$1 value=""
  shift
  while (($#)); do
    [[ $1 == "$flag" && $# -ge 2 ]] && value=$2
    shift
  done
  echo "$value"
}

# Waits for the launcher (PID) and returns its exit code. UCX over TCP can hang inside MPI_Finalize after every
# rank has finished (openucx/ucx#8738): when every rank has left its marker and the launcher still runs 5 s
# later, it is ended (the ranks no longer catch SIGTERM by then) and the ranks' own exit code returned.
wait_for_launcher() { # PID
  local pid=$1 finished_at=0 rc=0
  while kill -0 "$pid" 2>/dev/null; do
    if (($(find "$GPT_FINALIZE_MARKER_DIR" -name 'rank*' | wc -l) == SLURM_NTASKS)); then
      ((finished_at)) || finished_at=$SECONDS
      if ((SECONDS - finished_at >= 5)); then
        rc=$(cat "$GPT_FINALIZE_MARKER_DIR"/rank* | sort -n | tail -1)
        echo "job $SLURM_JOB_ID: every rank finished (exit code $rc) but MPI_Finalize did not return in 5 s (UCX over TCP); ending the launcher"
        kill -TERM "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
        return "$rc"
      fi
    fi
    sleep 1 # a trapped SIGUSR1 runs when this returns
  done
  # bash keeps the status of an ended child for `wait`.
  wait "$pid"
}

train_and_requeue() {
  local launcher=()
  while (($#)) && [[ $1 != -- ]]; do
    launcher+=("$1")
    shift
  done
  shift
  local save iters
  save=$(last_flag_value --save "$@")
  iters=$(last_flag_value --train-iters "$@")
  echo "job $SLURM_JOB_ID (restart ${SLURM_RESTART_COUNT:-0}) on $SLURM_JOB_NODELIST: ${launcher[*]} gpt_train"
  # Each rank leaves a marker here when all its work is done, just before MPI_Finalize (on the shared
  # filesystem beside the checkpoints, so that every node's ranks reach it).
  export GPT_FINALIZE_MARKER_DIR="${save:-$SLURM_SUBMIT_DIR}/.finalize-$SLURM_JOB_ID-${SLURM_RESTART_COUNT:-0}"
  rm -rf "$GPT_FINALIZE_MARKER_DIR"
  mkdir -p "$GPT_FINALIZE_MARKER_DIR"
  "${launcher[@]}" "$@" &
  local pid=$! rc
  trap 'echo "job $SLURM_JOB_ID: SIGUSR1 (time limit near): asking gpt_train to save and stop"; kill -USR1 $pid' USR1
  wait_for_launcher "$pid"
  rc=$?
  trap - USR1
  rm -rf "$GPT_FINALIZE_MARKER_DIR"
  if ((rc != 0)); then
    echo "job $SLURM_JOB_ID: gpt_train failed (exit code $rc); not requeued"
    exit "$rc"
  fi
  if [[ -n $save && -n $iters && $(cat "$save/latest" 2>/dev/null) != "global_step$iters" ]]; then
    echo "job $SLURM_JOB_ID: stopped at $(cat "$save/latest" 2>/dev/null || echo 'no checkpoint') of $iters steps; requeueing"
    scontrol requeue "$SLURM_JOB_ID"
    exit 0
  fi
  echo "job $SLURM_JOB_ID: training complete ($iters steps)"
}
