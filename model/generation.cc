// NextTokenLogits: the sampling context rule, with or without the key/value cache; see generation.h.
#include "model/generation.h"

#include <algorithm>
#include <stdexcept>

#include "kernels/cpu/cpu_ops.h"

namespace gpt {

NextTokenLogits::NextTokenLogits(GPT2<float>& model, bool kv_cache, Ops* backend)
    : model_(model),
      ops_(backend ? *backend : cpu_ops()),
      cache_arena_("decoder", Arena::kUnlimited, &ops_.device_memory()),
      decoder_params_(model.params.data()),
      window_(model.config().seq_len, 0) {
  if (backend && !kv_cache)
    throw std::invalid_argument("NextTokenLogits: a device backend runs only the key/value-cache steps");
  if (!kv_cache) return;
  decoder_ = std::make_unique<Decoder<float>>(model.config(), ops_, cache_arena_, model.config().seq_len);
  if (backend) {
    const int64_t n = int64_t(model.params.size());
    const Tensor params = cache_arena_.allocate_tensor("weights", "model", {n}, DType::kF32);
    ops_.upload(params, model.params.data());
    decoder_params_ = static_cast<const float*>(params.data);
  }
}

const float* NextTokenLogits::operator()(const std::vector<int32_t>& ids) {
  if (decoder_ && ids.size() <= size_t(decoder_->capacity())) {
    const Tensor* logits = nullptr;
    while (decoder_->length() < int(ids.size()))
      logits = &decoder_->step(decoder_params_, ids[decoder_->length()]);
    if (ops_.device() == Device::kCPU) return static_cast<const float*>(logits->data);
    host_logits_.resize(size_t(logits->numel()));
    ops_.download(host_logits_.data(), *logits);
    return host_logits_.data();
  }
  const size_t n = std::min(ids.size(), window_.size());
  std::copy(ids.end() - n, ids.end(), window_.begin());
  std::fill(window_.begin() + n, window_.end(), 0);
  model_.forward(window_.data(), nullptr);
  return model_.logits() + int64_t(n - 1) * model_.config().padded_vocab();
}

}  // namespace gpt
