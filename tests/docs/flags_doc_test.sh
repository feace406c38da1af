#!/usr/bin/env bash
# docs/flags.md against the binaries' --help: scripts/flags_doc --print renders the page again from the
# binaries built here, and it must equal the committed page.
#   flags_doc_test.sh FLAGS_DOC FLAGS_MD BIN...
set -euo pipefail
flags_doc=$1 committed=$2
shift 2
fresh="${TEST_TMPDIR:-$(mktemp -d)}/flags.md"
"$flags_doc" --print "$@" >"$fresh"
if ! diff -u "$committed" "$fresh" >"$fresh.diff"; then
  head -n 60 "$fresh.diff"
  echo "FAIL: docs/flags.md differs from the binaries' --help; run scripts/flags_doc and commit docs/flags.md"
  exit 1
fi
echo "PASS: docs/flags.md is the --help of $# binaries ($(wc -l <"$committed") lines)"
