// GPT2: the whole model over one flat parameter vector; see model.h.
#include "model/model.h"

#include <algorithm>

#include "model/init.h"

namespace gpt {

template <typename Real>
GPT2<Real>::GPT2(const GPTConfig& config, int micro_batch)
    : config_(config), table_(make_param_table(config)), B_(micro_batch) {
  const int T = config_.seq_len, L = config_.num_layers;
  const size_t BTC = size_t(B_) * T * config_.hidden;
  params.assign(table_.total, Real(0));
  grads.assign(table_.total, Real(0));
  residual_.assign((L + 1) * BTC, Real(0));
  blocks_.resize(L);
  for (auto& block : blocks_) block.resize(config_, B_, T);
  scratch_.resize(config_, B_, T);
  head_.resize(config_, B_, T);
  dresidual_.assign(BTC, Real(0));
}

template <typename Real>
void GPT2<Real>::init(uint64_t seed) {
  init_gpt2_params(config_, table_, seed, 0, table_.total, params.data());
}

template <typename Real>
void GPT2<Real>::zero_grad() {
  std::fill(grads.begin(), grads.end(), Real(0));
}

template <typename Real>
void GPT2<Real>::set_dropout(double hidden, double attention, uint64_t seed) {
  hidden_dropout_ = hidden;
  attention_dropout_ = attention;
  dropout_seed_ = seed;
}

template <typename Real>
Dropout GPT2<Real>::dropout() const {
  return Dropout{hidden_dropout_, attention_dropout_, dropout_seed_,
                 windows_.empty() ? nullptr : windows_.data()};
}

template <typename Real>
Real GPT2<Real>::forward(const int32_t* inputs, const int32_t* targets) {
  return forward(inputs, targets, nullptr);
}

template <typename Real>
Real GPT2<Real>::forward(const int32_t* inputs, const int32_t* targets, const int64_t* windows) {
  const int T = config_.seq_len, L = config_.num_layers;
  const size_t BT = size_t(B_) * T;
  inputs_.assign(inputs, inputs + BT);
  if (targets) targets_.assign(targets, targets + BT);
  // Kept for the backward, which must replay this forward's masks.
  if (windows) {
    windows_.assign(windows, windows + B_);
  } else {
    windows_.clear();
  }
  const Dropout drop = dropout();
  embed_forward(config_, unit_params(ParamTable::kWte), unit_params(ParamTable::kWpe), inputs, B_, T,
                residual(0), drop);
  for (int l = 0; l < L; ++l) {
    block_forward(config_, unit_params(ParamTable::block_unit(l)), residual(l), residual(l + 1), blocks_[l],
                  B_, T, drop, l);
  }
  const Real* lnf = unit_params(table_.final_norm_unit());
  return head_forward(config_, lnf, lnf + config_.hidden, unit_params(ParamTable::kWte), residual(L), targets,
                      head_, B_, T);
}

template <typename Real>
void GPT2<Real>::backward(Real loss_multiplier) {
  const int T = config_.seq_len, L = config_.num_layers, C = config_.hidden;
  const Real dloss = loss_multiplier / static_cast<Real>(B_ * T);
  const Dropout drop = dropout();
  const Real* lnf = unit_params(table_.final_norm_unit());
  Real* dlnf = unit_grads(table_.final_norm_unit());
  head_backward(config_, lnf, unit_params(ParamTable::kWte), dlnf, dlnf + C, unit_grads(ParamTable::kWte),
                residual(L), targets_.data(), head_, dloss, dresidual_.data(), B_, T);
  for (int l = L - 1; l >= 0; --l) {
    const int unit = ParamTable::block_unit(l);
    block_backward(config_, unit_params(unit), unit_grads(unit), residual(l), blocks_[l], scratch_,
                   dresidual_.data(), B_, T, drop, l);
  }
  embed_backward(config_, unit_grads(ParamTable::kWte), unit_grads(ParamTable::kWpe), inputs_.data(),
                 dresidual_.data(), B_, T, drop);
}

template <typename Real>
size_t GPT2<Real>::activation_bytes() const {
  size_t total =
      residual_.size() * sizeof(Real) + dresidual_.size() * sizeof(Real) + scratch_.bytes() + head_.bytes();
  for (const auto& block : blocks_) total += block.bytes();
  return total;
}

template class GPT2<float>;
template class GPT2<double>;

}  // namespace gpt
