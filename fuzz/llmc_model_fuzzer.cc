// Fuzz target: the llm.c model-file reader (gpt_export/gpt_generate --model, gpt_train --init-from) on any
// file. A file is either read whole or rejected with a ModelFileError of one line.
#include <cstdint>

#include "fuzz/fuzz_support.h"
#include "model/llmc_format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static gpt::fuzz::ScratchFile input;
  try {
    gpt::read_llmc_model(input.write(data, size));
  } catch (const gpt::UsageError& e) {
    gpt::fuzz::expect_one_line(e);
  }
  return 0;
}
