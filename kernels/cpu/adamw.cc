// AdamW update, CPU: one streaming pass over param, grad, m, v (memory-bound, so nothing is read twice).
//   g = grad_scale grad;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   param -= lr (m / (1-b1^step) / (sqrt(v / (1-b2^step)) + eps) + wd param)
// With decoupled = false it is Adam with L2 regularization instead: g += wd param, and no decoupled term.
// The bias corrections are computed once in double and folded into per-call constants of the scalar type.
#include "kernels/cpu/adamw.h"

#include <cmath>

namespace gpt::cpu {

template <typename Real>
void adamw_update(Real* param, const Real* grad, Real* m, Real* v, int64_t n, const AdamWHyper& hyper,
                  int64_t step, Real grad_scale) {
  const double bc1 = 1.0 - std::pow(hyper.beta1, double(step));
  const double bc2 = 1.0 - std::pow(hyper.beta2, double(step));
  const Real b1 = Real(hyper.beta1), one_b1 = Real(1.0 - hyper.beta1);
  const Real b2 = Real(hyper.beta2), one_b2 = Real(1.0 - hyper.beta2);
  const Real inv_bc1 = Real(1.0 / bc1), inv_bc2 = Real(1.0 / bc2);
  const Real lr = Real(hyper.lr), eps = Real(hyper.eps), wd = Real(hyper.weight_decay);
  if (!hyper.decoupled) {
    // Classic Adam with L2 regularization (DeepSpeed's "Adam" with adam_w_mode false): the decay joins the
    // gradient, and so passes through the moments.
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      const Real g = grad[i] * grad_scale + wd * param[i];
      const Real mi = b1 * m[i] + one_b1 * g;
      const Real vi = b2 * v[i] + one_b2 * g * g;
      m[i] = mi;
      v[i] = vi;
      param[i] -= lr * ((mi * inv_bc1) / (std::sqrt(vi * inv_bc2) + eps));
    }
    return;
  }
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const Real g = grad[i] * grad_scale;
    const Real mi = b1 * m[i] + one_b1 * g;
    const Real vi = b2 * v[i] + one_b2 * g * g;
    m[i] = mi;
    v[i] = vi;
    param[i] -= lr * ((mi * inv_bc1) / (std::sqrt(vi * inv_bc2) + eps) + wd * param[i]);
  }
}

template void adamw_update<float>(float*, const float*, float*, float*, int64_t, const AdamWHyper&, int64_t,
                                  float);
template void adamw_update<double>(double*, const double*, double*, double*, int64_t, const AdamWHyper&,
                                   int64_t, double);

}  // namespace gpt::cpu
