// GELU, tanh approximation (GPT-2), forward and backward, CPU. With s = sqrt(2/pi), k = 0.044715:
//   forward:  u = s (x + k x^3);  y = x/2 (1 + tanh u)
//   backward: dx += dy [ (1 + tanh u)/2 + x/2 (1 - tanh^2 u) s (1 + 3 k x^2) ]
// tanh is Eigen's vectorized one (a scalar std::tanh per element would make this cheap op expensive); threads
// take fixed-size chunks, each with tanh(u) in a small stack buffer.
#include "kernels/cpu/gelu.h"

#include <algorithm>

#include "kernels/cpu/internal.h"

namespace gpt::cpu {

namespace {
constexpr int64_t kChunk = 4096;  // elements per task: a few L1-sized passes, plenty of tasks to balance
constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kCubic = 0.044715;
}  // namespace

template <typename Real>
void gelu_forward(Real* out, const Real* inp, int64_t n) {
  const Real s = Real(kSqrt2OverPi), k = Real(kCubic);
#pragma omp parallel for schedule(static)
  for (int64_t i0 = 0; i0 < n; i0 += kChunk) {
    const int64_t len = std::min(kChunk, n - i0);
    const Real* x = inp + i0;
    Real* y = out + i0;
    Real th[kChunk];
#pragma omp simd
    for (int64_t i = 0; i < len; ++i) th[i] = s * (x[i] + k * x[i] * x[i] * x[i]);
    detail::tanh_array(th, th, len);
#pragma omp simd
    for (int64_t i = 0; i < len; ++i) y[i] = Real(0.5) * x[i] * (Real(1) + th[i]);
  }
}

template <typename Real>
void gelu_backward(Real* dinp, const Real* inp, const Real* dout, int64_t n) {
  const Real s = Real(kSqrt2OverPi), k = Real(kCubic);
#pragma omp parallel for schedule(static)
  for (int64_t i0 = 0; i0 < n; i0 += kChunk) {
    const int64_t len = std::min(kChunk, n - i0);
    const Real* x = inp + i0;
    const Real* dy = dout + i0;
    Real* dx = dinp + i0;
    Real th[kChunk];
#pragma omp simd
    for (int64_t i = 0; i < len; ++i) th[i] = s * (x[i] + k * x[i] * x[i] * x[i]);
    detail::tanh_array(th, th, len);
#pragma omp simd
    for (int64_t i = 0; i < len; ++i) {
      const Real sech2 = Real(1) - th[i] * th[i];
      const Real du = s * (Real(1) + Real(3) * k * x[i] * x[i]);
      dx[i] += dy[i] * (Real(0.5) * (Real(1) + th[i]) + Real(0.5) * x[i] * sech2 * du);
    }
  }
}

template void gelu_forward<float>(float*, const float*, int64_t);
template void gelu_forward<double>(double*, const double*, int64_t);
template void gelu_backward<float>(float*, const float*, const float*, int64_t);
template void gelu_backward<double>(double*, const double*, const double*, int64_t);

}  // namespace gpt::cpu
