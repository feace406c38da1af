// AdamW's update of one element, written once for the CPU kernel (kernels/cpu/adamw.cc) and the CUDA kernels
// (kernels/cuda/adamw.cu), so both backends compute the same operations in the same order:
//   g = grad_scale grad  (+ wd param in L2 mode);  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   param -= lr (m / (1-b1^step) / (sqrt(v / (1-b2^step)) + eps)  (+ wd param when decoupled))
// The bias corrections are computed once per call in double on the host and folded into constants of the
// scalar type (Constants); the element update is force-inlined so the CPU's `omp simd` loops still vectorize.
#pragma once

#include <cmath>
#include <cstdint>

#include "tensor/host_device.h"

namespace gpt::adamw {

// The per-call constants of one update, in the scalar type of the state.
template <typename Real>
struct Constants {
  Real b1, one_b1;   // beta1 and 1 - beta1 (the latter computed in double, then rounded)
  Real b2, one_b2;   // beta2 and 1 - beta2
  Real inv_bc1;      // 1 / (1 - beta1^step)
  Real inv_bc2;      // 1 / (1 - beta2^step)
  Real lr, eps, wd;  // learning rate, epsilon, weight decay
  Real grad_scale;   // multiplies every gradient first (unscaling and clipping fold into it)
};

// Host only: the constants for hyperparameters `hyper` (any type with the fields of gpt::AdamWHyper) at the
// 1-based `step`.
template <typename Real, typename Hyper>
inline Constants<Real> constants(const Hyper& hyper, int64_t step, Real grad_scale) {
  const double bc1 = 1.0 - std::pow(hyper.beta1, double(step));
  const double bc2 = 1.0 - std::pow(hyper.beta2, double(step));
  return Constants<Real>{
      .b1 = Real(hyper.beta1),
      .one_b1 = Real(1.0 - hyper.beta1),
      .b2 = Real(hyper.beta2),
      .one_b2 = Real(1.0 - hyper.beta2),
      .inv_bc1 = Real(1.0 / bc1),
      .inv_bc2 = Real(1.0 / bc2),
      .lr = Real(hyper.lr),
      .eps = Real(hyper.eps),
      .wd = Real(hyper.weight_decay),
      .grad_scale = grad_scale,
  };
}

// The correctly rounded square root on either side (CUDA's sqrtf/sqrt are IEEE-rounded unless fast math).
GPT_HOST_DEVICE_INLINE float square_root(float x) {
#if defined(__CUDA_ARCH__)
  return ::sqrtf(x);
#else
  return std::sqrt(x);
#endif
}
GPT_HOST_DEVICE_INLINE double square_root(double x) {
#if defined(__CUDA_ARCH__)
  return ::sqrt(x);
#else
  return std::sqrt(x);
#endif
}

// One update of param, m and v from the raw gradient. kDecoupled: AdamW (decay applied to the parameter
// directly); otherwise Adam with L2 regularization (decay joins the gradient and passes through the moments,
// DeepSpeed's "Adam" with adam_w_mode false).
template <bool kDecoupled, typename Real>
GPT_HOST_DEVICE_INLINE void update(Real& param, Real& m, Real& v, Real grad, const Constants<Real>& c) {
  const Real p = param;
  const Real g = kDecoupled ? grad * c.grad_scale : grad * c.grad_scale + c.wd * p;
  const Real mi = c.b1 * m + c.one_b1 * g;
  const Real vi = c.b2 * v + c.one_b2 * g * g;
  m = mi;
  v = vi;
  const Real direction = (mi * c.inv_bc1) / (square_root(vi * c.inv_bc2) + c.eps);
  if constexpr (kDecoupled) {
    param = p - c.lr * (direction + c.wd * p);
  } else {
    param = p - c.lr * direction;
  }
}

}  // namespace gpt::adamw
