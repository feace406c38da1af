// Fuzz target: the GPT-2 tokenizer's encode on any bytes (invalid UTF-8 included). Every byte string must
// encode to ids that are not <|endoftext|> and decode back to exactly the same bytes.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer.h"
#include "fuzz/tokenizer_support.h"

// Loads the vocabulary before fuzzing starts, so a missing file fails at once with the tokenizer's message.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  gpt::fuzz::load_tokenizer_or_exit();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const std::vector<int32_t> ids = gpt::fuzz::tokenizer().encode(text);
  for (int32_t id : ids) {
    if (id < 0 || id >= gpt::data::kEndOfText) {
      std::fprintf(stderr, "encode produced id %d\n", id);
      std::abort();
    }
  }
  if (gpt::fuzz::tokenizer().decode(ids) != text) {
    std::fprintf(stderr, "decode(encode(text)) != text\n");
    std::abort();
  }
  return 0;
}
