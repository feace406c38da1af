#!/usr/bin/env bash
# canary_test.sh CANARY BUG EXPECTED_REPORT...: runs the planted bug and passes only if the program fails with
# each expected line of a sanitizer report, proving the sanitizer of this build is on.
set -uo pipefail
canary=$1 bug=$2
shift 2
"$canary" "$bug" >"$TEST_TMPDIR/out" 2>&1
code=$?
cat "$TEST_TMPDIR/out"
if ((code == 0)); then
  echo "FAIL: the planted $bug ran without a sanitizer stopping it"
  exit 1
fi
for expected in "$@"; do
  if ! grep -qF -- "$expected" "$TEST_TMPDIR/out"; then
    echo "FAIL: the report of the planted $bug lacks '$expected'"
    exit 1
  fi
done
echo "PASS: the planted $bug was reported (exit code $code)"
