// The tokenizer the two tokenizer fuzz targets share: GPT-2's vocabulary from the data directory
// ($GPT_DATA_DIR, filled by scripts/setup), loaded once before fuzzing starts.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <exception>

#include "data/tokenizer.h"

namespace gpt::fuzz {

inline data::Tokenizer& tokenizer() {
  static data::Tokenizer t(data::default_vocab_file(), data::default_merge_file());
  return t;
}

// For LLVMFuzzerInitialize: a missing vocabulary stops the run at once with the tokenizer's own message.
inline void load_tokenizer_or_exit() {
  try {
    tokenizer();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    std::exit(2);
  }
}

}  // namespace gpt::fuzz
