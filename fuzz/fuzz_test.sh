#!/usr/bin/env bash
# The test of one fuzz target: FUZZER CORPUS_DIR [-runs=N].
# Without -runs (a build without libFuzzer) it replays every input of the committed corpus once. With -runs
# (--config=fuzz) libFuzzer starts from the corpus and runs N more inputs from the fixed seed 1, one process,
# so the run is the same every time; new inputs go to a scratch directory, never into the corpus.
set -euo pipefail
fuzzer=$1 corpus=$2
shift 2
if (($# == 0)); then
  exec "$fuzzer" "$corpus"
fi
scratch=$(mktemp -d "${TEST_TMPDIR:-/tmp}/fuzz.XXXXXX")
exec "$fuzzer" "$@" -seed=1 -timeout=20 -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="$scratch/" "$scratch" "$corpus"
