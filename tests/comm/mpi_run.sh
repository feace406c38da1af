#!/bin/bash
# Runs a test program under MPI: mpi_run.sh RANKS PROGRAM [ARGS...]. A hard time limit turns a deadlock into a
# failure with a message instead of a test that hangs until Bazel's own timeout.
set -u
ranks=$1
shift
timeout --signal=KILL "${MPI_TEST_TIMEOUT_S:-100}" mpiexec -n "$ranks" "$@"
rc=$?
if [ "$rc" -eq 137 ]; then
  echo "mpi_run.sh: mpiexec -n $ranks $* did not finish in ${MPI_TEST_TIMEOUT_S:-100} s (deadlock?)" >&2
fi
exit "$rc"
