// GPT2: the whole model over one flat parameter vector; see model.h.
#include "model/model.h"

#include <algorithm>

#include "kernels/cpu/cpu_ops.h"
#include "model/init.h"

namespace gpt {

template <typename Real>
GPT2<Real>::GPT2(const GPTConfig& config, int micro_batch, int tile_factor)
    : config_(config),
      table_(make_param_table(config, tile_factor)),
      B_(micro_batch),
      loop_(config, micro_batch, Recompute{}, cpu_ops(), arena_, tile_factor) {
  params.assign(table_.total, Real(0));
  grads.assign(table_.total, Real(0));
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
Real GPT2<Real>::forward(const int32_t* inputs, const int32_t* targets) {
  return forward(inputs, targets, nullptr);
}

template <typename Real>
Real GPT2<Real>::forward(const int32_t* inputs, const int32_t* targets, const int64_t* windows) {
  const Dropout dropout{hidden_dropout_, attention_dropout_, dropout_seed_, windows};
  return loop_.forward(slices_, inputs, targets, dropout, true);
}

template <typename Real>
void GPT2<Real>::backward(Real loss_multiplier) {
  loop_.backward(slices_, slices_, loss_multiplier);
}

template class GPT2<float>;
template class GPT2<double>;

}  // namespace gpt
