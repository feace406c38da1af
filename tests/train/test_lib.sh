# Sourced by the gpt_train shell tests: a scratch folder, failure counting, and llm.c token shards (a header of
# 256 little-endian int32: magic 20240520, version 1, token count; then uint16 tokens).
TMP=${TEST_TMPDIR:-$(mktemp -d)}
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

le32() { printf "\\x$(printf %02x $(($1 & 255)))\\x$(printf %02x $((($1 >> 8) & 255)))\\x$(printf %02x $((($1 >> 16) & 255)))\\x$(printf %02x $((($1 >> 24) & 255)))"; }
le16() { printf "\\x$(printf %02x $(($1 & 255)))\\x$(printf %02x $((($1 >> 8) & 255)))"; }
shard_header() { le32 20240520; le32 1; le32 "$1"; head -c 1012 /dev/zero; }

write_shard() {  # PATH ID... : a shard of the given token ids
  local path=$1
  shift
  { shard_header $#; for id in "$@"; do le16 "$id"; done; } >"$path"
}
write_random_shard() {  # PATH COUNT : random token ids below 16384
  { shard_header "$2"; head -c $((2 * $2)) /dev/urandom | tr '\200-\377' '\000-\177' | tr '\100-\177' '\000-\077'; } >"$1"
}
write_seeded_shard() {  # PATH COUNT SEED : the same pseudo-random token ids below 16384 in every run
  { shard_header "$2"; python3 -c 'import random, sys; random.seed(int(sys.argv[2])); sys.stdout.buffer.write(bytes(random.getrandbits(8) if i % 2 == 0 else random.getrandbits(6) for i in range(2 * int(sys.argv[1]))))' "$2" "$3"; } >"$1"
}
write_zero_shard() {  # PATH COUNT : COUNT tokens of id 0
  { shard_header "$2"; head -c $((2 * $2)) /dev/zero; } >"$1"
}

# Exports two checkpoints with gpt_export and compares the whole-model files: the same header, every value
# within 1% of LR x STEPS, and at most one value in a thousand over 1e-6. Two runs that split the model
# differently round differently, and Adam turns rounding on near-zero gradients into up to a sizeable part of
# lr per step: hence a bound of 1% of lr per step, and differences over 1e-6 kept rare. The exports stay in
# $TMP/export_a.bin and $TMP/export_b.bin.
compare_exports() {  # GPT_EXPORT CKPT_A CKPT_B LR STEPS WHAT
  local export=$1 a=$2 b=$3 lr=$4 steps=$5 what=$6
  "$export" --load "$a" --output "$TMP/export_a.bin" >/dev/null 2>&1 || { fail "gpt_export of $a failed"; return; }
  "$export" --load "$b" --output "$TMP/export_b.bin" >/dev/null 2>&1 || { fail "gpt_export of $b failed"; return; }
  python3 - "$TMP/export_a.bin" "$TMP/export_b.bin" "$lr" "$steps" <<'PY' || fail "$what"
import struct, sys
a, b = (open(p, "rb").read() for p in sys.argv[1:3])
lr, steps = float(sys.argv[3]), int(sys.argv[4])
n = (len(a) - 1024) // 4
x, y = (struct.unpack(f"<{n}f", d[1024:]) for d in (a, b))
differences = [abs(p - q) for p, q in zip(x, y)]
worst, over = max(differences), sum(d > 1e-6 for d in differences)
print(f"exported models: {n} values, largest difference {worst:.2e}, {over} over 1e-6")
sys.exit(0 if len(a) == len(b) and a[:1024] == b[:1024] and worst <= 0.01 * lr * steps and over <= n // 1000 else 1)
PY
}
