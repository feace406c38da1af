// Fuzz target: the Hugging Face safetensors reader (model.safetensors as the hub's GPT-2 files are) on any
// file, with one attention head (no config.json is beside the scratch file). A file is either read whole or
// rejected with a ModelFileError of one line.
#include <cstdint>

#include "fuzz/fuzz_support.h"
#include "model/safetensors_format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static gpt::fuzz::ScratchFile input;
  try {
    gpt::read_safetensors_model(input.write(data, size), /*heads=*/1);
  } catch (const gpt::UsageError& e) {
    gpt::fuzz::expect_one_line(e);
  }
  return 0;
}
