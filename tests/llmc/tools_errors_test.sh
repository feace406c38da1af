#!/usr/bin/env bash
# gpt_export and gpt_generate refuse bad command lines and bad model files with exit code 2 and one stderr
# line naming the problem (and, for files, the path and byte offset); --help exits 0.
# Args: paths of gpt_export and gpt_generate. Needs the GPT-2 vocabulary in $GPT_DATA_DIR.
set -uo pipefail
EXPORT=$1 GENERATE=$2
TMP=${TEST_TMPDIR:-$(mktemp -d)}
failures=0

fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}
# Runs a command that must fail with exit code 2 and one stderr line containing every given fragment.
expect_error() {  # name "fragment|fragment..." command...
  local name=$1 fragments=$2
  shift 2
  "$@" >/dev/null 2>"$TMP/err"
  local rc=$?
  [[ $rc == 2 ]] || fail "$name: exit code $rc, expected 2"
  [[ $(wc -l <"$TMP/err") == 1 ]] || fail "$name: stderr is not one line: $(cat "$TMP/err")"
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

TINY=(--num-layers 1 --hidden-size 8 --num-attention-heads 2 --max-position-embeddings 8)
"$EXPORT" --init-only "${TINY[@]}" --output "$TMP/tiny.bin" >/dev/null || fail "tiny export"
"$EXPORT" --init-only "${TINY[@]}" --vocab-size 300 --output "$TMP/small_vocab.bin" >/dev/null ||
  fail "small-vocabulary export"
"$EXPORT" --help >/dev/null || fail "gpt_export --help"
"$GENERATE" --help >/dev/null || fail "gpt_generate --help"

# gpt_export
expect_error "no source" "no source given|--init-only" "$EXPORT" --output "$TMP/x.bin"
expect_error "two sources" "more than one source" "$EXPORT" --init-only --model "$TMP/tiny.bin" --output "$TMP/x.bin"
expect_error "checkpoint" "--load: $TMP/ckpt: no checkpoint here" \
  "$EXPORT" --load "$TMP/ckpt" --output "$TMP/x.bin"
expect_error "no output" "--output FILE is required" "$EXPORT" --init-only "${TINY[@]}"
expect_error "shape flag with --model" "--hidden-size applies to --init-only" \
  "$EXPORT" --model "$TMP/tiny.bin" --hidden-size 8 --output "$TMP/x.bin"
expect_error "heads" "--hidden-size 30 is not divisible by --num-attention-heads 4" \
  "$EXPORT" --init-only --hidden-size 30 --num-attention-heads 4 --output "$TMP/x.bin"
expect_error "unknown flag" "unknown flag --num-layer|--num-layers" "$EXPORT" --num-layer 2
expect_error "missing model" "$TMP/none.bin: cannot open model file" \
  "$EXPORT" --model "$TMP/none.bin" --output "$TMP/x.bin"
expect_error "unwritable output" "$TMP/no/dir/x.bin.tmp.|cannot create model file" \
  "$EXPORT" --init-only "${TINY[@]}" --output "$TMP/no/dir/x.bin"
[[ ! -e "$TMP/x.bin" ]] || fail "a refused export left $TMP/x.bin"

# gpt_generate
head -c 2000 "$TMP/tiny.bin" >"$TMP/truncated.bin"
{ printf '\x28\x0e\x35\x01'; tail -c +5 "$TMP/tiny.bin"; } >"$TMP/magic.bin"
expect_error "no model" "no model given" "$GENERATE" --prompt hi
expect_error "two models" "both --model and --load" "$GENERATE" --model "$TMP/tiny.bin" --load "$TMP/ckpt"
expect_error "checkpoint" "--load: $TMP/ckpt: no checkpoint here" "$GENERATE" --load "$TMP/ckpt"
expect_error "truncated" "$TMP/truncated.bin: truncated|file ends at byte offset 2000" \
  "$GENERATE" --model "$TMP/truncated.bin"
expect_error "magic" "$TMP/magic.bin: wrong magic 20254248 at byte offset 0" "$GENERATE" --model "$TMP/magic.bin"
expect_error "prompt outside vocabulary" "--prompt token 0 has id 15496, outside this model's vocabulary of 300" \
  "$GENERATE" --model "$TMP/small_vocab.bin" --prompt "Hello world"
expect_error "empty prompt, no separator" "lacks <|endoftext|>" "$GENERATE" --model "$TMP/small_vocab.bin"
expect_error "top-k range" "--top-k is -1" "$GENERATE" --model "$TMP/tiny.bin" --top-k -1
expect_error "temperature range" "--temperature is -0.5" "$GENERATE" --model "$TMP/tiny.bin" --temperature -0.5
expect_error "missing vocabulary" "$TMP/none.json|scripts/setup" \
  "$GENERATE" --model "$TMP/tiny.bin" --vocab-file "$TMP/none.json"

# An empty prompt starts from <|endoftext|>; the text is the prompt and then the continuation.
out=$("$GENERATE" --model "$TMP/tiny.bin" --max-new-tokens 3 --print-ids 2>/dev/null) || fail "empty prompt"
[[ "$out" == "<|endoftext|>"* && "$out" == *"prompt ids: 50256"* ]] || fail "empty prompt output: $out"

if ((failures)); then
  echo "$failures failure(s)" >&2
  exit 1
fi
echo "all checks passed"
