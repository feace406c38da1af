// The tokenizer on the real corpora (issue 3 acceptance): golden token totals measured with the reference
// JavaScript encoder, and decode(encode(x)) == x byte for byte over all of SOTU. Needs $GPT_DATA_DIR.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "tests/data/test_files.h"

namespace {

using gpt::data::testing::data_file;
using gpt::data::testing::read_bytes;

gpt::data::Tokenizer load_gpt2() {
  return {data_file("encoder.json"), data_file("vocab.bpe")};
}

}  // namespace

TEST_CASE("Moby Dick's data.txt encoded as one text is 317,756 tokens and decodes back") {
  gpt::data::Tokenizer tokenizer = load_gpt2();
  const std::string text = read_bytes(data_file("moby.txt"));
  REQUIRE(text.size() == 1204997);
  const std::vector<int32_t> ids = tokenizer.encode(text);
  CHECK(ids.size() == 317756);
  CHECK(tokenizer.decode(ids) == text);
}

TEST_CASE("the 233 SOTU files, each encoded alone, total 2,074,279 tokens and decode back") {
  gpt::data::Tokenizer tokenizer = load_gpt2();
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(data_file("sotu"))) {
    if (entry.path().extension() == ".txt") files.push_back(entry.path().string());
  }
  REQUIRE(files.size() == 233);
  int64_t tokens = 0, bytes = 0;
  for (const std::string& file : files) {
    const std::string text = read_bytes(file);
    const std::vector<int32_t> ids = tokenizer.encode(text);
    tokens += static_cast<int64_t>(ids.size());
    bytes += static_cast<int64_t>(text.size());
    CAPTURE(file);
    CHECK(tokenizer.decode(ids) == text);
  }
  CHECK(bytes == 10761413);
  CHECK(tokens == 2074279);
}
