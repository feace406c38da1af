// Reader and writer of llm.c token shards (format in shard.h), and data-path glob expansion.
#include "data/shard.h"

#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>

namespace gpt::data {

static_assert(std::endian::native == std::endian::little, "shards are little-endian; add byte swapping");

namespace {

constexpr const char* kRegenerate = "regenerate it with gpt_prepare";

struct FileCloser {
  void operator()(FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<FILE, FileCloser>;

File open_for_reading(const std::string& path) {
  File f(std::fopen(path.c_str(), "rb"));
  if (!f) {
    throw DataError(path + ": cannot open token shard (" + std::strerror(errno) +
                    "); check the path given as data path");
  }
  return f;
}

int64_t file_size(const std::string& path, FILE* f) {
  struct stat st {};
  if (fstat(fileno(f), &st) != 0) {
    throw DataError(path + ": cannot stat token shard (" + std::strerror(errno) + ")");
  }
  if (!S_ISREG(st.st_mode)) {
    throw DataError(path + ": is not a regular file; give a token shard file or a glob of them");
  }
  return st.st_size;
}

// Reads and checks the header; returns the token count it declares, validated against the file size.
int64_t read_header(const std::string& path, FILE* f) {
  const int64_t size = file_size(path, f);
  if (size < kShardHeaderBytes) {
    throw DataError(path + ": file is " + std::to_string(size) + " bytes, shorter than the " +
                    std::to_string(kShardHeaderBytes) + "-byte shard header (ends at byte offset " +
                    std::to_string(size) + "); not a token shard, " + kRegenerate);
  }
  std::array<int32_t, kShardHeaderInts> header{};
  if (std::fread(header.data(), 4, header.size(), f) != header.size()) {
    throw DataError(path + ": read error in the header at byte offset 0 (" + std::strerror(errno) + ")");
  }
  if (header[0] != kShardMagic) {
    throw DataError(path + ": wrong magic " + std::to_string(header[0]) + " at byte offset 0 (expected " +
                    std::to_string(kShardMagic) + "); not an llm.c token shard, " + kRegenerate);
  }
  if (header[1] != kShardVersion) {
    throw DataError(path + ": unsupported shard version " + std::to_string(header[1]) +
                    " at byte offset 4 (expected " + std::to_string(kShardVersion) + "); " + kRegenerate);
  }
  const int64_t count = header[2];
  if (count < 0) {
    throw DataError(path + ": negative token count " + std::to_string(count) + " at byte offset 8; " +
                    kRegenerate);
  }
  const int64_t expected = kShardHeaderBytes + 2 * count;
  if (size < expected) {
    throw DataError(path + ": truncated body: the header (byte offset 8) declares " + std::to_string(count) +
                    " tokens, so " + std::to_string(expected) + " bytes, but the file ends at byte offset " +
                    std::to_string(size) + "; the copy is incomplete, copy or " + kRegenerate);
  }
  if (size > expected) {
    throw DataError(path + ": " + std::to_string(size - expected) +
                    " unexpected bytes after the last token, from byte offset " + std::to_string(expected) +
                    " (the header declares " + std::to_string(count) + " tokens); " + kRegenerate);
  }
  return count;
}

}  // namespace

int64_t shard_token_count(const std::string& path) {
  File f = open_for_reading(path);
  return read_header(path, f.get());
}

std::vector<uint16_t> read_shard(const std::string& path, int vocab_size) {
  File f = open_for_reading(path);
  const int64_t count = read_header(path, f.get());
  std::vector<uint16_t> tokens(static_cast<size_t>(count));
  if (!tokens.empty() && std::fread(tokens.data(), 2, tokens.size(), f.get()) != tokens.size()) {
    throw DataError(path + ": read error in the token body after byte offset " +
                    std::to_string(kShardHeaderBytes) + " (" + std::strerror(errno) + ")");
  }
  const auto bad = std::find_if(tokens.begin(), tokens.end(), [&](uint16_t t) { return t >= vocab_size; });
  if (bad != tokens.end()) {
    const int64_t index = bad - tokens.begin();
    throw DataError(path + ": token id " + std::to_string(*bad) + " at byte offset " +
                    std::to_string(kShardHeaderBytes + 2 * index) + " (token " + std::to_string(index) +
                    ") is >= the vocabulary size " + std::to_string(vocab_size) +
                    "; pass the --vocab-size the shard was made for, or " + kRegenerate);
  }
  return tokens;
}

void write_shard(const std::string& path, std::span<const uint16_t> tokens) {
  if (tokens.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    throw DataError(path + ": " + std::to_string(tokens.size()) +
                    " tokens do not fit one shard (its header counts in int32); split the input into "
                    "several shards");
  }
  // Same directory, so the rename is atomic; the pid keeps concurrent writers apart.
  const std::string temp = path + ".tmp." + std::to_string(getpid());
  File f(std::fopen(temp.c_str(), "wb"));
  if (!f) {
    throw DataError(temp + ": cannot create token shard (" + std::strerror(errno) +
                    "); check that the output directory exists and is writable");
  }
  std::array<int32_t, kShardHeaderInts> header{};
  header[0] = kShardMagic;
  header[1] = kShardVersion;
  header[2] = static_cast<int32_t>(tokens.size());
  bool ok = std::fwrite(header.data(), 4, header.size(), f.get()) == header.size() &&
            (tokens.empty() || std::fwrite(tokens.data(), 2, tokens.size(), f.get()) == tokens.size());
  ok = std::fflush(f.get()) == 0 && ok;
  const int write_errno = errno;
  ok = std::fclose(f.release()) == 0 && ok;
  if (!ok || std::rename(temp.c_str(), path.c_str()) != 0) {
    const std::string reason = std::strerror(ok ? errno : write_errno);
    std::remove(temp.c_str());
    throw DataError(path + ": cannot write token shard (" + reason +
                    "); check free disk space and permissions");
  }
}

std::vector<std::string> expand_data_path(const std::string& pattern) {
  struct stat st {};
  if (stat(pattern.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) {
      throw DataError(pattern + ": is a directory; give a shard file or a quoted glob such as '" + pattern +
                      "/*_train*.bin'");
    }
    return {pattern};
  }
  glob_t matches{};
  const int rc = glob(pattern.c_str(), GLOB_ERR, nullptr, &matches);
  std::vector<std::string> paths;
  if (rc == 0) {
    for (size_t i = 0; i < matches.gl_pathc; ++i) {
      if (stat(matches.gl_pathv[i], &st) == 0 && S_ISREG(st.st_mode)) paths.emplace_back(matches.gl_pathv[i]);
    }
  }
  globfree(&matches);
  if (paths.empty()) {
    throw DataError(pattern +
                    ": no file matches this data path; check the path, quote a glob so the shell "
                    "leaves it to us, or make the shards with gpt_prepare");
  }
  std::sort(paths.begin(), paths.end());
  return paths;
}

}  // namespace gpt::data
