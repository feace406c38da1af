// Fuzz target: the token-shard reader (llm.c's .bin format) on any file. A file is either read, and then the
// tokens are exactly the bytes after the header, or rejected with a DataError of one line.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "data/shard.h"
#include "fuzz/fuzz_support.h"

namespace {

constexpr int kVocab = 50257;  // GPT-2's: the reader rejects larger ids

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static gpt::fuzz::ScratchFile input;
  std::vector<uint16_t> tokens;
  try {
    tokens = gpt::data::read_shard(input.write(data, size), kVocab);
  } catch (const gpt::UsageError& e) {
    gpt::fuzz::expect_one_line(e);
    return 0;
  }
  const size_t body = tokens.size() * sizeof(uint16_t);
  if (size != gpt::data::kShardHeaderBytes + body ||
      (body > 0 && std::memcmp(tokens.data(), data + gpt::data::kShardHeaderBytes, body) != 0)) {
    std::fprintf(stderr, "an accepted shard's tokens are not the bytes after its header\n");
    std::abort();
  }
  return 0;
}
