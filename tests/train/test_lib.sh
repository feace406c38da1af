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
