// LayerLoop: GPT-2's forward and backward over gather units; see loop.h.
#include "model/loop.h"

namespace gpt {

LoopSchedule loop_schedule(int num_units) {
  const int U = num_units, L = U - 3;  // wte, wpe, the blocks, ln_f (params.h)
  LoopSchedule s;
  for (int u = 0; u < U; ++u) s.forward.push_back(u);
  s.backward = {U - 1, ParamTable::kWte};
  for (int l = L - 1; l >= 0; --l) s.backward.push_back(ParamTable::block_unit(l));
  for (int u = U - 1; u >= 0; --u) s.gradients.push_back(u);
  return s;
}

template <typename Real>
LayerLoop<Real>::LayerLoop(const GPTConfig& config, int micro_batch, bool checkpoint_activations, Ops& ops,
                           Arena& arena)
    : config_(config),
      table_(make_param_table(config)),
      schedule_(loop_schedule(int(table_.units.size()))),
      B_(micro_batch),
      T_(config.seq_len),
      checkpoint_(checkpoint_activations),
      ops_(ops) {
  const int64_t L = config.num_layers, B = B_, T = T_, C = config.hidden;
  const DType dtype = dtype_of<Real>();
  auto allocate = [&](std::vector<int64_t> shape, DType type) {
    return arena.allocate_tensor("activation", "activations", std::move(shape), type);
  };
  residual_ = allocate({L + 1, B, T, C}, dtype);
  blocks_.resize(checkpoint_ ? 1 : L);
  for (auto& block : blocks_) block.allocate(arena, dtype, config, B_, T_);
  scratch_.allocate(arena, dtype, config, B_, T_);
  head_.allocate(arena, dtype, config, B_, T_);
  dresidual_ = allocate({B, T, C}, dtype);
  if (checkpoint_) recompute_out_ = allocate({B, T, C}, dtype);
  // The micro-batch's tokens on the device: input, not activations.
  inputs_ = arena.allocate_tensor("input tokens", "buffers", {B, T}, DType::kI32);
  targets_ = arena.allocate_tensor("target tokens", "buffers", {B, T}, DType::kI32);
}

template <typename Real>
Tensor LayerLoop<Real>::residual(int layer) const {
  const size_t BTC = size_t(B_) * T_ * config_.hidden;
  return Tensor{static_cast<Real*>(residual_.data) + size_t(layer) * BTC,
                {B_, T_, config_.hidden},
                residual_.dtype,
                residual_.device};
}

template <typename Real>
Dropout LayerLoop<Real>::dropout() const {
  Dropout d = dropout_;
  d.windows = windows_.empty() ? nullptr : windows_.data();
  return d;
}

template <typename Real>
Real LayerLoop<Real>::forward(WeightSource<Real>& weights, const int32_t* inputs, const int32_t* targets,
                              const Dropout& dropout, bool keep_for_backward) {
  const int L = config_.num_layers, C = config_.hidden;
  ops_.upload(inputs_, inputs);
  has_targets_ = targets != nullptr;
  if (has_targets_) ops_.upload(targets_, targets);
  dropout_ = dropout;
  if (dropout.windows) {
    windows_.assign(dropout.windows, dropout.windows + B_);
  } else {
    windows_.clear();
  }
  const Dropout drop = this->dropout();
  weights.begin_pass(Pass::kForward, schedule_.forward);
  const Real* wte = weights.acquire(ParamTable::kWte);
  const Real* wpe = weights.acquire(ParamTable::kWpe);
  embed_forward(ops_, config_, wte, wpe, inputs_, residual(0), drop);
  weights.release(ParamTable::kWpe);
  for (int l = 0; l < L; ++l) {
    const int unit = ParamTable::block_unit(l);
    const Real* w = weights.acquire(unit);
    BlockActivations& acts = blocks_[checkpoint_ || !keep_for_backward ? 0 : l];
    block_forward(ops_, config_, w, residual(l), residual(l + 1), acts, drop, l);
    weights.release(unit);
  }
  const int lnf_unit = table_.final_norm_unit();
  const Real* lnf = weights.acquire(lnf_unit);
  const Real loss =
      head_forward(ops_, config_, lnf, lnf + C, wte, residual(L), has_targets_ ? targets_ : Tensor{}, head_);
  weights.release(lnf_unit);
  weights.release(ParamTable::kWte);
  return loss;
}

template <typename Real>
Real* LayerLoop<Real>::backward_head(WeightSource<Real>& weights, GradientSink<Real>& gradients,
                                     Real dloss_per_token) {
  const int lnf_unit = table_.final_norm_unit();
  const Real* lnf = weights.acquire(lnf_unit);
  const Real* wte = weights.acquire(ParamTable::kWte);
  Real* dlnf = gradients.open(lnf_unit);
  // wte is tied to the output projection: its gradient stays open until the embedding's backward.
  Real* dwte = gradients.open(ParamTable::kWte);
  head_backward(ops_, config_, lnf, wte, dlnf, dlnf + config_.hidden, dwte, residual(config_.num_layers),
                targets_, head_, dloss_per_token, dresidual_);
  weights.release(lnf_unit);
  weights.release(ParamTable::kWte);
  gradients.ready(lnf_unit);
  return dwte;
}

template <typename Real>
void LayerLoop<Real>::backward_block(WeightSource<Real>& weights, GradientSink<Real>& gradients, int layer) {
  const int unit = ParamTable::block_unit(layer);
  const Dropout drop = dropout();
  const Real* w = weights.acquire(unit);
  BlockActivations& acts = blocks_[checkpoint_ ? 0 : layer];
  if (checkpoint_) {
    // Recompute this block's forward from its saved input, with the weights of this same acquisition.
    block_forward(ops_, config_, w, residual(layer), recompute_out_, acts, drop, layer);
  }
  block_backward(ops_, config_, w, gradients.open(unit), residual(layer), acts, scratch_, dresidual_, drop,
                 layer);
  weights.release(unit);
  gradients.ready(unit);
}

template <typename Real>
void LayerLoop<Real>::backward(WeightSource<Real>& weights, GradientSink<Real>& gradients,
                               Real loss_multiplier) {
  weights.begin_pass(Pass::kBackward, schedule_.backward);
  Real* dwte = backward_head(weights, gradients, loss_multiplier / static_cast<Real>(B_ * T_));
  for (int l = config_.num_layers - 1; l >= 0; --l) backward_block(weights, gradients, l);
  // The embedding's backward needs no weights: it scatters into wte's open gradient and into wpe's.
  // The masked gradient borrows a block temporary, free once the blocks are done.
  embed_backward(ops_, config_, dwte, gradients.open(ParamTable::kWpe), inputs_, dresidual_, scratch_.d_ln1,
                 dropout());
  gradients.ready(ParamTable::kWpe);
  gradients.ready(ParamTable::kWte);
}

template <typename Real>
size_t LayerLoop<Real>::activation_bytes() const {
  size_t total = residual_.nbytes() + dresidual_.nbytes() + (checkpoint_ ? recompute_out_.nbytes() : 0) +
                 scratch_.bytes() + head_.bytes();
  for (const auto& block : blocks_) total += block.bytes();
  return total;
}

template class LayerLoop<float>;
template class LayerLoop<double>;

}  // namespace gpt
