#!/usr/bin/env bash
# Reproduces a golden recording (each set made once and never modified: data/ on an AVX2 machine before the
# one-loop refactor, data_avx512/ on an AVX-512 machine at issue 35's start): runs record.sh again and
# compares every file with the set whose ISA flags (isa_flags.txt) equal this machine's, bit for bit. Where
# no set matches, with data/ within 1e-5 relative, and within 5e-3 for the files of the configurations that
# quantize (qwZ, qgZ: zeropp.jsonl, zeropp_qwz.json, zeropp_qgz.json, zeropp_zeropp.json): another ISA's GEMMs
# differ in the last bit, and a quantizer turns such a difference into a whole step of its grid now and then
# (measured on AVX-512: up to 2e-3 in grad_norm, 1e-4 in loss), which the next steps carry on. Integers (byte
# counts, steps) are compared exactly everywhere. With --sanitized (the --config=asan build, -O2 with
# instrumentation: other rounding, which qwZ/qgZ amplify) it checks that every file is produced, with the
# sanitizers watching the whole recording, and leaves the numbers to the optimized build.
#   golden_test.sh GPT_TRAIN ZEROPP_BENCH GOLDEN_COMPARE GOLDEN_DIR... [--sanitized]
set -uo pipefail
TRAIN=$1 ZEROPP=$2 COMPARE=$3
shift 3
SETS=() SANITIZED=
for arg; do
  if [[ $arg == --sanitized ]]; then SANITIZED=$arg; else SETS+=("$arg"); fi
done
HERE=$(dirname "$0")
OUT=${TEST_TMPDIR:-$(mktemp -d)}/golden
"$HERE/record.sh" "$TRAIN" "$ZEROPP" "$OUT" || { echo "FAIL: record.sh did not finish"; exit 1; }

isa=$("$HERE/isa_flags.sh")
GOLDEN=
for set in "${SETS[@]}"; do
  [[ "$isa" == "$(cat "$set/isa_flags.txt")" ]] && GOLDEN=$set
done
tolerance=()
if [[ $SANITIZED == --sanitized ]]; then
  GOLDEN=${GOLDEN:-${SETS[0]}}
  echo "sanitized build: checking that every file is produced, not the numbers"
elif [[ -n $GOLDEN ]]; then
  echo "ISA flags match the recording in $GOLDEN: comparing bit for bit"
else
  GOLDEN=${SETS[0]}
  echo "ISA flags ($(echo $isa)) match no recording; against $GOLDEN ($(tr '\n' ' ' <"$GOLDEN/isa_flags.txt")):" \
    "comparing within 1e-5, 5e-3 where weights or gradients are quantized, integers exactly"
  tolerance=(--tolerance 1e-5)
fi
tolerance_for() {  # golden file name -> its comparison options
  if ((${#tolerance[@]})) && [[ $1 =~ ^(zeropp\.jsonl|zeropp_(qwz|qgz|zeropp)\.json)$ ]]; then
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
