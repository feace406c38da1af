// GELU's per-element math (GPT-2's tanh approximation), written once for host and device. With
// s = sqrt(2/pi) and k = 0.044715:
//   u = s (x + k x^3);  forward y = x/2 (1 + tanh u)
//   derivative dy/dx = (1 + tanh u)/2 + x/2 (1 - tanh^2 u) s (1 + 3 k x^2)
// The pieces around tanh are separate functions taking tanh(u) as an argument, so a backend with its own
// vectorized tanh can share them: the CPU kernel (kernels/cpu/gelu.cc) calls them around Eigen's; forward()
// and derivative() add the scalar tanh of each side (std::tanh, CUDA's tanhf/tanh).
#pragma once

#include <cmath>

#include "tensor/host_device.h"

namespace gpt::gelu {

inline constexpr double kSqrt2OverPi = 0.79788456080286535588;
inline constexpr double kCubic = 0.044715;

// u = s (x + k x^3), the argument of tanh.
template <typename Real>
GPT_HOST_DEVICE_INLINE Real tanh_argument(Real x) {
  const Real s = Real(kSqrt2OverPi), k = Real(kCubic);
  return s * (x + k * x * x * x);
}

// y = x/2 (1 + tanh u), given th = tanh(u).
template <typename Real>
GPT_HOST_DEVICE_INLINE Real forward_from_tanh(Real x, Real th) {
  return Real(0.5) * x * (Real(1) + th);
}

// dy/dx, given th = tanh(u).
template <typename Real>
GPT_HOST_DEVICE_INLINE Real derivative_from_tanh(Real x, Real th) {
  const Real s = Real(kSqrt2OverPi), k = Real(kCubic);
  const Real sech2 = Real(1) - th * th;
  const Real du = s * (Real(1) + Real(3) * k * x * x);
  return Real(0.5) * (Real(1) + th) + Real(0.5) * x * sech2 * du;
}

GPT_HOST_DEVICE_INLINE float hyperbolic_tangent(float u) {
#if defined(__CUDA_ARCH__)
  return ::tanhf(u);
#else
  return std::tanh(u);
#endif
}
GPT_HOST_DEVICE_INLINE double hyperbolic_tangent(double u) {
#if defined(__CUDA_ARCH__)
  return ::tanh(u);
#else
  return std::tanh(u);
#endif
}

template <typename Real>
GPT_HOST_DEVICE_INLINE Real forward(Real x) {
  return forward_from_tanh(x, hyperbolic_tangent(tanh_argument(x)));
}

template <typename Real>
GPT_HOST_DEVICE_INLINE Real derivative(Real x) {
  return derivative_from_tanh(x, hyperbolic_tangent(tanh_argument(x)));
}

}  // namespace gpt::gelu
