// Decoder: one token per step through the model with a key/value cache; see decoder.h.
#include "model/decoder.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

namespace gpt {

template <typename Real>
Decoder<Real>::Decoder(const GPTConfig& config, Ops& ops, Arena& arena, int capacity)
    : config_(config),
      table_(make_param_table(config)),
      ops_(ops),
      capacity_(capacity > 0 ? std::min(capacity, config.max_positions) : config.max_positions) {
  const DType dtype = dtype_of<Real>();
  const int64_t C = config.hidden;
  token_ = arena.allocate_tensor("decoder token", "buffers", {1, 1}, DType::kI32);
  x_ = arena.allocate_tensor("decoder row", "activations", {1, 1, C}, dtype);
  y_ = arena.allocate_tensor("decoder row", "activations", {1, 1, C}, dtype);
  for (int l = 0; l < config.num_layers; ++l) {
    qkv_cache_.push_back(arena.allocate_tensor("key/value cache", "kv cache", {capacity_, 3 * C}, dtype));
  }
  acts_.allocate(arena, dtype, config);
  head_.allocate(arena, dtype, config, 1, 1);
}

template <typename Real>
const Tensor& Decoder<Real>::step(const Real* params, int32_t token) {
  if (length_ >= capacity_) {
    throw std::logic_error("Decoder: the sequence is full (" + std::to_string(capacity_) +
                           " positions); reset and re-run a window");
  }
  const int64_t C = config_.hidden;
  auto unit = [&](int u) { return params + table_.units[u].offset; };
  auto view = [&](const Real* p, std::vector<int64_t> shape) {
    return Tensor{const_cast<Real*>(p), std::move(shape), dtype_of<Real>(), ops_.device()};
  };
  ops_.upload(token_, &token);
  // The embedding op adds position row t of its table to token t: give it the table from this position on.
  ops_.embedding_forward(x_, token_, view(unit(ParamTable::kWte), {config_.padded_vocab(), C}),
                         view(unit(ParamTable::kWpe) + length_ * C, {1, C}));
  for (int l = 0; l < config_.num_layers; ++l) {
    block_decode(ops_, config_, unit(table_.block_unit(l)), x_, y_, acts_, qkv_cache_[l], length_);
    std::swap(x_, y_);
  }
  const Real* lnf = unit(table_.final_norm_unit());
  head_forward(ops_, config_, lnf, lnf + C, unit(ParamTable::kWte), x_, Tensor{}, head_);
  ++length_;
  return head_.probs;
}

template class Decoder<float>;
template class Decoder<double>;

}  // namespace gpt
