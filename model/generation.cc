// NextTokenLogits: the sampling context rule, with or without the key/value cache; see generation.h.
#include "model/generation.h"

#include <algorithm>

#include "kernels/cpu/cpu_ops.h"

namespace gpt {

NextTokenLogits::NextTokenLogits(GPT2<float>& model, bool kv_cache)
    : model_(model), window_(model.config().seq_len, 0) {
  if (kv_cache)
    decoder_ =
        std::make_unique<Decoder<float>>(model.config(), cpu_ops(), cache_arena_, model.config().seq_len);
}

const float* NextTokenLogits::operator()(const std::vector<int32_t>& ids) {
  if (decoder_ && ids.size() <= size_t(decoder_->capacity())) {
    const Tensor* logits = nullptr;
    while (decoder_->length() < int(ids.size()))
      logits = &decoder_->step(model_.params.data(), ids[decoder_->length()]);
    return static_cast<const float*>(logits->data);
  }
  const size_t n = std::min(ids.size(), window_.size());
  std::copy(ids.end() - n, ids.end(), window_.begin());
  std::fill(window_.begin() + n, window_.end(), 0);
  model_.forward(window_.data(), nullptr);
  return model_.logits() + int64_t(n - 1) * model_.config().padded_vocab();
}

}  // namespace gpt
