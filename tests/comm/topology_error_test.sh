#!/bin/bash
# A --ranks-per-node that does not divide the world size: every rank prints the same one line naming the
# setting, the values and the fix, and the job exits with code 2 (no hang, no MPI abort banner). A valid one
# runs and exits 0.
set -u
program=$1
runner=$(dirname "$0")/mpi_run.sh
fail=0

expect() {  # expect RANKS K CODE LINES PATTERN
  local out rc
  out=$("$runner" "$1" "$program" --ranks-per-node "$2" 2>&1)
  rc=$?
  local lines
  lines=$(printf '%s\n' "$out" | grep -c -- "$5")
  if [ "$rc" -ne "$3" ] || [ "$lines" -ne "$4" ]; then
    echo "FAIL: -n $1 --ranks-per-node $2: exit $rc (want $3), $lines lines matching '$5' (want $4); output:"
    printf '%s\n' "$out"
    fail=1
  else
    echo "ok: -n $1 --ranks-per-node $2: exit $rc; $(printf '%s\n' "$out" | head -1)"
  fi
}

expect 4 3 2 4 '^error: --ranks-per-node 3 does not divide the world size 4 (mpiexec -n 4); use one of 1, 2, 4, or launch a multiple of 3 ranks$'
expect 3 -1 2 3 '^error: --ranks-per-node -1 is not a positive number of ranks'
expect 2 4 2 2 '^error: --ranks-per-node 4 does not divide the world size 2'
expect 4 2 0 1 '^topology: 2 nodes x 2 ranks per node (simulated)$'
exit $fail
