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
  "${launcher[@]}" "$@" &
  local pid=$! rc
  trap 'echo "job $SLURM_JOB_ID: SIGUSR1 (time limit near): asking gpt_train to save and stop"; kill -USR1 $pid' USR1
  # A trapped signal interrupts `wait` (status > 128) while the launcher still runs: wait again until it ends;
  # bash keeps the status of an ended child for the last `wait`.
  while wait "$pid"; rc=$?; kill -0 "$pid" 2>/dev/null; do :; done
  wait "$pid"
  rc=$?
  trap - USR1
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
