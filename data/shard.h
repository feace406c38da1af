// Token shards in llm.c's format, the project's on-disk training data: a header of 256 little-endian int32
// (magic 20240520, version 1, token count, the rest zero), then the tokens as little-endian uint16.
// A shard's file size is exactly 1024 + 2 x tokens bytes. Also the data-path expansion (file or glob).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/user_error.h"

namespace gpt::data {

// An error the user can fix (bad file, bad flag value). what() is one complete line naming the file, the
// problem, where, and what to do; a UsageError, so every main reports it and exits with code 2.
struct DataError : UsageError {
  using UsageError::UsageError;
};

inline constexpr int32_t kShardMagic = 20240520;
inline constexpr int32_t kShardVersion = 1;
inline constexpr int64_t kShardHeaderInts = 256;
inline constexpr int64_t kShardHeaderBytes = kShardHeaderInts * 4;

// Reads and validates a whole shard: magic, version, the file size against the header's token count, and
// every token < vocab_size. Throws DataError naming the file, the problem and the byte offset.
std::vector<uint16_t> read_shard(const std::string& path, int vocab_size);

// Reads only the header and checks the file size; returns the token count. For tools that want to know a
// shard's length without loading it.
int64_t shard_token_count(const std::string& path);

// Writes a shard to a temporary name in the same directory and renames it, so a reader never sees a
// partial file. Throws DataError when the file cannot be written or holds more than INT32_MAX tokens.
void write_shard(const std::string& path, std::span<const uint16_t> tokens);

// A file path, or a glob(3) pattern such as "dir/sotu_train_*.bin", expanded to the regular files it
// names, sorted by byte order. Throws DataError naming the pattern when nothing matches.
std::vector<std::string> expand_data_path(const std::string& pattern);

}  // namespace gpt::data
