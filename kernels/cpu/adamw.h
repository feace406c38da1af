// AdamW (Loshchilov & Hutter): Adam with decoupled weight decay, as torch.optim.AdamW.
#pragma once
#include <cstdint>

namespace gpt::cpu {

struct AdamWHyper {
  double lr = 3e-4;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.0;  // the caller passes 0 for biases and LayerNorm parameters
  bool decoupled = true;  // AdamW; false: Adam with L2 regularization (weight decay added to the gradient)
};

// One update of n elements; step is the 1-based count of applied updates (for bias correction):
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;  mhat = m/(1-b1^step);  vhat = v/(1-b2^step)
//   param -= lr * (mhat / (sqrt(vhat) + eps) + weight_decay * param)
// grad_scale multiplies every gradient first (unscaling and clipping fold into it).
template <typename Real>
void adamw_update(Real* param, const Real* grad, Real* m, Real* v, int64_t n, const AdamWHyper& hyper,
                  int64_t step, Real grad_scale = Real(1));

}  // namespace gpt::cpu
