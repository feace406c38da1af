// AdamW (Loshchilov & Hutter): Adam with decoupled weight decay, as torch.optim.AdamW.
#pragma once
#include <cstdint>

#include "kernels/ops.h"

namespace gpt::cpu {

using AdamWHyper = gpt::AdamWHyper;  // kernels/ops.h

// One update of n elements; step is the 1-based count of applied updates (for bias correction):
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;  mhat = m/(1-b1^step);  vhat = v/(1-b2^step)
//   param -= lr * (mhat / (sqrt(vhat) + eps) + weight_decay * param)
// grad_scale multiplies every gradient first (unscaling and clipping fold into it).
template <typename Real>
void adamw_update(Real* param, const Real* grad, Real* m, Real* v, int64_t n, const AdamWHyper& hyper,
                  int64_t step, Real grad_scale = Real(1));

}  // namespace gpt::cpu
