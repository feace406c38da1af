// Helpers for the model-file tests: a scratch directory, raw bytes in and out for corrupt fixtures, a
// tiny GPT-2 shape, running the tools as subprocesses, and the fetched vocabulary ($GPT_DATA_DIR).
#pragma once

#include <doctest/doctest.h>
#include <sys/wait.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "model/config.h"

namespace gpt::llmc_testing {

// Bazel gives every test a private TEST_TMPDIR; outside Bazel, the system temp directory.
inline std::string scratch(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string base = dir && *dir ? dir : std::filesystem::temp_directory_path().string();
  std::filesystem::create_directories(base);
  return base + "/" + name;
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "cannot read " << path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Overwrites 4 bytes at a byte offset (a header field or one parameter).
template <typename T>
void poke(std::string& bytes, int64_t offset, T value) {
  static_assert(sizeof(T) == 4);
  std::memcpy(bytes.data() + offset, &value, 4);
}

// Bit-exact comparison of float vectors (NaN payloads and -0.0 included).
inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// Two layers, every dimension distinct so a swapped header field or tensor shows.
inline GPTConfig tiny_config(int vocab = 300) {
  GPTConfig c;
  c.num_layers = 2;
  c.hidden = 16;
  c.heads = 2;
  c.max_positions = 12;
  c.seq_len = 12;
  c.vocab = vocab;
  return c;
}

// A tool built by Bazel, from the environment variable the BUILD file sets to its runfiles path.
inline std::string tool(const char* variable) {
  const char* path = std::getenv(variable);
  REQUIRE_MESSAGE((path && *path), variable << " is not set; run this test with bazel test");
  return path;
}

inline std::string quote(const std::string& arg) {
  std::string quoted(1, '\'');
  for (char ch : arg) {
    if (ch == '\'') {
      quoted.append("'\\''");  // close, an escaped quote, reopen
    } else {
      quoted.push_back(ch);
    }
  }
  quoted.push_back('\'');
  return quoted;
}

struct Outcome {
  int exit_code = -1;
  std::string out, err;
};

// Runs a program with arguments (no shell interpretation of them), capturing stdout and stderr.
inline Outcome run_tool(const std::string& program, const std::vector<std::string>& args) {
  const std::string out = scratch("tool.out"), err = scratch("tool.err");
  std::string command = quote(program);
  for (const std::string& a : args) command.append(" ").append(quote(a));
  command.append(" >").append(quote(out)).append(" 2>").append(quote(err));
  const int status = std::system(command.c_str());
  Outcome r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = read_bytes(out);
  r.err = read_bytes(err);
  return r;
}

// A fetched data file; a test that needs it fails (never passes) without it, naming the fix.
inline std::string data_file(const std::string& name) {
  const char* dir = std::getenv("GPT_DATA_DIR");
  if (!dir || !*dir) {
    FAIL("GPT_DATA_DIR is not set, so the GPT-2 vocabulary (" << name
                                                              << ") cannot be found: run scripts/setup, "
                                                                 "then bazel test "
                                                                 "--test_env=GPT_DATA_DIR=... "
                                                                 "(scripts/test does this)");
  }
  const std::string path = std::string(dir) + "/" + name;
  if (!std::filesystem::exists(path)) FAIL(path << " is missing: run scripts/setup");
  return path;
}

}  // namespace gpt::llmc_testing
