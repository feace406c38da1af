#!/usr/bin/env bash
# The data tools end to end: gpt_tokenize (encode, --decode, missing vocabulary), gpt_prepare (shards,
# split, unreadable input) and gpt_shard_info (bad shards). Errors must be one line and exit code 2.
# Args: paths of gpt_tokenize, gpt_prepare, gpt_shard_info. Needs the vocabulary in $GPT_DATA_DIR.
set -uo pipefail
TOKENIZE=$1 PREPARE=$2 SHARD_INFO=$3
TMP=${TEST_TMPDIR:-$(mktemp -d)}
failures=0

fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}
expect_eq() {  # name actual expected
  [[ "$2" == "$3" ]] || fail "$1: got '$2', expected '$3'"
}
# Runs a command that must fail with exit code 2 and one stderr line containing every given fragment.
expect_error() {  # name "fragment|fragment..." command...
  local name=$1 fragments=$2
  shift 2
  "$@" >/dev/null 2>"$TMP/err"
  local rc=$?
  expect_eq "$name: exit code" "$rc" 2
  expect_eq "$name: stderr lines" "$(wc -l <"$TMP/err")" 1
  local fragment
  IFS='|' read -ra list <<<"$fragments"
  for fragment in "${list[@]}"; do
    grep -qF -- "$fragment" "$TMP/err" || fail "$name: stderr lacks '$fragment': $(cat "$TMP/err")"
  done
}

if [[ -z "${GPT_DATA_DIR:-}" || ! -f "$GPT_DATA_DIR/encoder.json" || ! -f "$GPT_DATA_DIR/vocab.bpe" ]]; then
  echo "FAIL: GPT_DATA_DIR ('${GPT_DATA_DIR:-unset}') lacks encoder.json/vocab.bpe: run scripts/setup, then" \
    "bazel test with --test_env=GPT_DATA_DIR=... (scripts/test does this)" >&2
  exit 1
fi

# gpt_tokenize
expect_eq "Hello world" "$(printf 'Hello world' | "$TOKENIZE")" "15496 995"
expect_eq "decode" "$(echo '15496 995' | "$TOKENIZE" --decode)" "Hello world"
printf 'caf\xe9 <|endoftext|>\n\x00\xff end' >"$TMP/odd.txt"
"$TOKENIZE" <"$TMP/odd.txt" | "$TOKENIZE" --decode | cmp -s - "$TMP/odd.txt" || fail "round trip of odd bytes"
expect_error "missing vocabulary" "/nonexistent/encoder.json|scripts/setup" \
  env GPT_DATA_DIR=/nonexistent "$TOKENIZE"
expect_error "missing merges flag" "$TMP/none.bpe|scripts/setup" "$TOKENIZE" --merge-file "$TMP/none.bpe"
expect_error "bad id" "'12x' at byte offset 2" bash -c "echo '5 12x' | '$TOKENIZE' --decode"
expect_error "unknown flag" "--bogus" "$TOKENIZE" --bogus

# gpt_prepare: ten documents, the last one (10%) to validation
mkdir -p "$TMP/texts"
for i in 0 1 2 3 4 5 6 7 8 9; do printf 'Document number %d.' "$i" >"$TMP/texts/doc$i.txt"; done
summary=$("$PREPARE" --output-prefix "$TMP/out/docs" "$TMP/texts" 2>/dev/null) || fail "gpt_prepare failed"
[[ "$summary" == "gpt_prepare: 10 documents (9 train, 1 val), 50 tokens (45 train, 5 val), 180 bytes,"* ]] ||
  fail "summary: $summary"
expect_eq "val shard" "$("$SHARD_INFO" "$TMP/out/docs_val.bin")" \
  "$TMP/out/docs_val.bin: 5 tokens, 1 documents, largest id 50256"
expect_eq "val text" "$("$SHARD_INFO" --decode "$TMP/out/docs_val.bin")" "<|endoftext|>Document number 9."
expect_eq "train size" "$(stat -c %s "$TMP/out/docs_train.bin")" $((1024 + 2 * 45))
"$PREPARE" --output-prefix "$TMP/out/split" --val-fraction 0.2 "$TMP/texts/*.txt" >/dev/null 2>&1
expect_eq "val fraction 0.2" "$("$SHARD_INFO" "$TMP/out/split_val.bin")" \
  "$TMP/out/split_val.bin: 10 tokens, 2 documents, largest id 50256"
expect_error "unreadable text" "$TMP/texts/missing.txt: cannot read text file (No such file or directory)" \
  "$PREPARE" --output-prefix "$TMP/out/x" "$TMP/texts/doc0.txt" "$TMP/texts/missing.txt"
expect_error "not a directory" "$TMP/texts/doc0.txt/a.txt: cannot read text file (Not a directory)" \
  "$PREPARE" --output-prefix "$TMP/out/x" "$TMP/texts/doc0.txt/a.txt"
expect_error "bad fraction" "--val-fraction 'x'" "$PREPARE" --output-prefix "$TMP/out/x" --val-fraction x "$TMP/texts"
expect_error "one document" "leave none for training" "$PREPARE" --output-prefix "$TMP/out/x" "$TMP/texts/doc0.txt"

# gpt_shard_info: the shard errors as gpt_train reports them
cp "$TMP/out/docs_train.bin" "$TMP/magic.bin"
printf '\x01' | dd of="$TMP/magic.bin" bs=1 seek=0 conv=notrunc status=none
expect_error "wrong magic" "$TMP/magic.bin: wrong magic 20240385 at byte offset 0" "$SHARD_INFO" "$TMP/magic.bin"
cp "$TMP/out/docs_train.bin" "$TMP/short.bin"
truncate -s -3 "$TMP/short.bin"
expect_error "truncated" "$TMP/short.bin: truncated body|ends at byte offset 1111" "$SHARD_INFO" "$TMP/short.bin"
expect_error "id >= vocab" "$TMP/out/docs_train.bin: token id 50256 at byte offset 1024 (token 0)|vocabulary size 1000" \
  "$SHARD_INFO" --vocab-size 1000 "$TMP/out/docs_train.bin"
expect_error "no match" "$TMP/out/nothing_*.bin: no file matches" "$SHARD_INFO" "$TMP/out/nothing_*.bin"

if ((failures)); then
  echo "$failures check(s) failed" >&2
  exit 1
fi
echo "all tool checks passed"
