// add_model_flags; see model_flags.h.
#include "train/model_flags.h"

#include <algorithm>

#include "base/user_error.h"

namespace gpt {

void add_model_flags(FlagParser& flags, GPTConfig* config, SeqLengthFlag seq_length) {
  flags.add_int("--num-layers", &config->num_layers, "transformer blocks", 1, 1 << 16);
  flags.add_int("--hidden-size", &config->hidden, "model width C", 1, 1 << 20);
  flags.add_int("--num-attention-heads", &config->heads, "attention heads (must divide the hidden size)", 1,
                1 << 16);
  if (seq_length == SeqLengthFlag::kYes) {
    flags.add_int("--seq-length", &config->seq_len, "tokens per training sequence", 1, 1 << 20);
  }
  flags.add_int("--max-position-embeddings", &config->max_positions, "rows of the position table", 1,
                1 << 20);
  flags.add_int("--vocab-size", &config->vocab, "vocabulary (padded to a multiple of 128 inside)", 2, 65536);
}

void add_short_model_aliases(FlagParser& flags) {
  flags.add_alias("--layers", "--num-layers");
  flags.add_alias("--hidden", "--hidden-size");
  flags.add_alias("--heads", "--num-attention-heads");
}

void add_bench_shape_flags(FlagParser& flags, GPTConfig* config, int* micro_batch,
                           const std::string& batch_help) {
  add_model_flags(flags, config);
  add_short_model_aliases(flags);
  flags.add_alias("--seq", "--seq-length");
  flags.add_int("--micro-batch-size", micro_batch, batch_help, 1, 1 << 16);
  flags.add_alias("--batch", "--micro-batch-size");
}

void finish_bench_shape(const FlagParser& flags, GPTConfig* config) {
  if (!flags.given("--max-position-embeddings")) config->max_positions = std::max(1024, config->seq_len);
  if (std::string problem = config->validate(); !problem.empty()) throw UsageError(problem);
}

}  // namespace gpt
