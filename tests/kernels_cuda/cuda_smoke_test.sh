#!/usr/bin/env bash
# cuda_smoke's contract: with a GPU it passes its checks (exit 0); without one it prints the one-line
# "no CUDA device is present ... needs an NVIDIA GPU" message and exits 2. Anything else fails this test.
set -uo pipefail
output=$("$1" 2>&1)
status=$?
echo "$output"
if [[ $status -eq 0 ]]; then
  exit 0
fi
if [[ $status -eq 2 && $(wc -l <<<"$output") -eq 1 && "$output" == *"no CUDA device is present"*"needs an NVIDIA GPU"* ]]; then
  echo "cuda_smoke_test: no device here; the message and exit code 2 are as intended"
  exit 0
fi
echo "cuda_smoke_test: unexpected exit code $status or output" >&2
exit 1
