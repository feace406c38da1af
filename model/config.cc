// Validation of a GPT-2 shape, with messages that name the flag a user would change.
#include "model/config.h"

namespace gpt {

int64_t GPTConfig::params_without_positions() const {
  const int64_t C = hidden;
  return int64_t(padded_vocab()) * C + int64_t(num_layers) * (12 * C * C + 13 * C) + 2 * C;
}

double GPTConfig::model_flops_per_token() const {
  return 6.0 * double(params_without_positions()) + 12.0 * num_layers * double(hidden) * seq_len;
}

Problems GPTConfig::problems() const {
  auto n = [](int v) { return std::to_string(v); };
  Problems found;
  if (num_layers < 1)
    found.push_back("--num-layers is " + n(num_layers) + "; a model needs at least 1 layer");
  if (hidden < 1) found.push_back("--hidden-size is " + n(hidden) + "; it must be positive");
  if (heads < 1) found.push_back("--num-attention-heads is " + n(heads) + "; it must be positive");
  if (hidden >= 1 && heads >= 1 && hidden % heads != 0) {
    found.push_back("--hidden-size " + n(hidden) + " is not divisible by --num-attention-heads " + n(heads) +
                    "; choose sizes so that hidden/heads is a whole number");
  }
  if (vocab < 2) found.push_back("--vocab-size is " + n(vocab) + "; it must be at least 2");
  if (vocab > 65536) {
    found.push_back("--vocab-size " + n(vocab) +
                    " does not fit the uint16 token shards; it must be at most 65536");
  }
  if (max_positions < 1)
    found.push_back("--max-position-embeddings is " + n(max_positions) + "; it must be positive");
  if (seq_len < 1) found.push_back("--seq-length is " + n(seq_len) + "; it must be positive");
  if (max_positions >= 1 && seq_len > max_positions) {
    found.push_back("--seq-length " + n(seq_len) + " exceeds --max-position-embeddings " + n(max_positions) +
                    "; lower the sequence length or raise the position table");
  }
  return found;
}

std::string GPTConfig::validate() const {
  return first_problem(problems());
}

}  // namespace gpt
