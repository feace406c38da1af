#!/usr/bin/env bash
# Reproduces the golden recording (tests/golden/data, made before the one-loop refactor and never modified):
# runs record.sh again and compares every file. Bit for bit where the machine's ISA flags equal the
# recording's (data/isa_flags.txt), within 1e-5 relative elsewhere, and within 5e-3 for the configurations
# that quantize (qwZ, qgZ): another ISA's GEMMs differ in the last bit, and a quantizer turns such a difference
# into a whole step of its grid now and then (measured on AVX-512: up to 2e-3 in grad_norm, 1e-4 in loss),
# which the next steps carry on. With --sanitized (the --config=asan build,
# -O2 with instrumentation: other rounding, which qwZ/qgZ amplify) it checks that every file is produced,
# with the sanitizers watching the whole recording, and leaves the numbers to the optimized build.
#   golden_test.sh GPT_TRAIN ZEROPP_BENCH GOLDEN_COMPARE GOLDEN_DIR [--sanitized]
set -uo pipefail
TRAIN=$1 ZEROPP=$2 COMPARE=$3 GOLDEN=$4 SANITIZED=${5:-}
HERE=$(dirname "$0")
OUT=${TEST_TMPDIR:-$(mktemp -d)}/golden
"$HERE/record.sh" "$TRAIN" "$ZEROPP" "$OUT" || { echo "FAIL: record.sh did not finish"; exit 1; }

tolerance=()
if [[ $SANITIZED == --sanitized ]]; then
  echo "sanitized build: checking that every file is produced, not the numbers"
elif [[ "$("$HERE/isa_flags.sh")" == "$(cat "$GOLDEN/isa_flags.txt")" ]]; then
  echo "ISA flags match the recording: comparing bit for bit"
else
  echo "ISA flags differ from the recording ($(tr '\n' ' ' <"$GOLDEN/isa_flags.txt")): comparing within 1e-5," \
    "5e-3 where weights or gradients are quantized"
  tolerance=(--tolerance 1e-5)
fi
tolerance_for() {  # golden file name -> its comparison options
  if ((${#tolerance[@]})) && [[ $1 =~ ^zeropp(_qwz|_qgz|_zeropp)?\.json ]]; then
    echo --tolerance 5e-3
  else
    echo "${tolerance[@]}"
  fi
}
failures=0 files=0
for golden in "$GOLDEN"/*.json "$GOLDEN"/*.jsonl; do
  name=$(basename "$golden")
  files=$((files + 1))
  if [[ ! -f "$OUT/$name" ]]; then
    echo "FAIL: $name was not produced"
    failures=$((failures + 1))
  elif [[ $SANITIZED != --sanitized ]] && ! "$COMPARE" "$golden" "$OUT/$name" $(tolerance_for "$name"); then
    echo "FAIL: $name differs"
    failures=$((failures + 1))
  fi
done
echo "$files golden files, $failures differ"
((files == 22 && failures == 0))
