// Fuzz target: the GPT-2 tokenizer's decode on any ids (the input read as little-endian int32). Ids outside
// the vocabulary are rejected with a DataError of one line; valid ids decode to bytes that encode and decode
// back to the same bytes.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "fuzz/fuzz_support.h"
#include "fuzz/tokenizer_support.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  gpt::fuzz::load_tokenizer_or_exit();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<int32_t> ids(size / sizeof(int32_t));
  if (!ids.empty()) std::memcpy(ids.data(), data, ids.size() * sizeof(int32_t));
  std::string text;
  try {
    text = gpt::fuzz::tokenizer().decode(ids);
  } catch (const gpt::UsageError& e) {
    gpt::fuzz::expect_one_line(e);
    return 0;
  }
  if (gpt::fuzz::tokenizer().decode(gpt::fuzz::tokenizer().encode(text)) != text) {
    std::fprintf(stderr, "decode(encode(decode(ids))) != decode(ids)\n");
    std::abort();
  }
  return 0;
}
