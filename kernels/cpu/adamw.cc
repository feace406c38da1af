// AdamW update, CPU: one streaming pass over param, grad, m, v (memory-bound, so nothing is read twice).
//   g = grad_scale grad;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   param -= lr (m / (1-b1^step) / (sqrt(v / (1-b2^step)) + eps) + wd param)
// With decoupled = false it is Adam with L2 regularization instead: g += wd param, and no decoupled term.
// The bias corrections are computed once in double and folded into per-call constants of the scalar type;
// the element update is kernels/common/adamw_element.h, which the CUDA kernels share.
#include "kernels/cpu/adamw.h"

#include "kernels/common/adamw_element.h"

namespace gpt::cpu {

template <typename Real>
void adamw_update(Real* param, const Real* grad, Real* m, Real* v, int64_t n, const AdamWHyper& hyper,
                  int64_t step, Real grad_scale) {
  const adamw::Constants<Real> c = adamw::constants(hyper, step, grad_scale);
  if (!hyper.decoupled) {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) adamw::update<false>(param[i], m[i], v[i], grad[i], c);
    return;
  }
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) adamw::update<true>(param[i], m[i], v[i], grad[i], c);
}

template void adamw_update<float>(float*, const float*, float*, float*, int64_t, const AdamWHyper&, int64_t,
                                  float);
template void adamw_update<double>(double*, const double*, double*, double*, int64_t, const AdamWHyper&,
                                   int64_t, double);

}  // namespace gpt::cpu
