// Helpers for the data tests: a scratch directory per test binary, raw file writing for corrupt fixtures,
// and the fetched data (vocabulary, corpora) found through $GPT_DATA_DIR, failing loudly when absent.
#pragma once

#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace gpt::data::testing {

// Bazel gives every test a private TEST_TMPDIR; outside Bazel, the system temp directory.
inline std::string scratch_dir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = dir && *dir ? dir : std::filesystem::temp_directory_path().string();
  std::filesystem::create_directories(path);
  return path;
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

// doctest's Contains takes its own string type; the tests build expected messages as std::string.
inline doctest::Contains contains(const std::string& fragment) {
  return doctest::Contains(fragment.c_str());
}

// Path of a fetched data file. A test that needs the data must not pass without it, so a missing file
// fails the test with the fix.
inline std::string data_file(const std::string& name) {
  const char* dir = std::getenv("GPT_DATA_DIR");
  if (!dir || !*dir) {
    FAIL("GPT_DATA_DIR is not set, so the fetched data ("
         << name
         << ") cannot be found: run scripts/setup, then "
            "bazel test ... --test_env=GPT_DATA_DIR=\"$GPT_DATA_DIR\" "
            "after `source scripts/env.sh` (scripts/test does this)");
  }
  const std::string path = std::string(dir) + "/" + name;
  if (!std::filesystem::exists(path)) {
    FAIL(path << " is missing: run scripts/setup to fetch the data into $GPT_DATA_DIR");
  }
  return path;
}

}  // namespace gpt::data::testing
