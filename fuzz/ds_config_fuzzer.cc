// Fuzz target: the DeepSpeed JSON config parser (--deepspeed_config FILE) on any bytes. An input is either
// accepted or rejected with a UsageError of one line; anything else (a crash, another exception, a sanitizer
// report) is a bug.
#include <cstdint>
#include <string>

#include "fuzz/fuzz_support.h"
#include "train/ds_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    gpt::parse_deepspeed_config(text, "fuzz.json");
  } catch (const gpt::UsageError& e) {
    gpt::fuzz::expect_one_line(e);
  }
  return 0;
}
