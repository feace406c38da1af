// GELU, tanh approximation (GPT-2), forward and backward, CPU: the per-element math around tanh is
// kernels/common/gelu_element.h's (shared with the CUDA kernels):
//   forward:  u = s (x + k x^3);  y = x/2 (1 + tanh u)
//   backward: dx += dy [ (1 + tanh u)/2 + x/2 (1 - tanh^2 u) s (1 + 3 k x^2) ]
// tanh is Eigen's vectorized one (a scalar std::tanh per element would make this cheap op expensive); threads
// take fixed-size chunks, each with tanh(u) in a small stack buffer.
#include "kernels/cpu/gelu.h"

#include <algorithm>

#include "kernels/common/gelu_element.h"
#include "kernels/cpu/internal.h"

namespace gpt::cpu {

namespace {
constexpr int64_t kChunk = 4096;  // elements per task: a few L1-sized passes, plenty of tasks to balance
}  // namespace

template <typename Real>
void gelu_forward(Real* out, const Real* inp, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i0 = 0; i0 < n; i0 += kChunk) {
    const int64_t len = std::min(kChunk, n - i0);
    const Real* x = inp + i0;
    Real* y = out + i0;
    Real th[kChunk];
#pragma omp simd
    for (int64_t i = 0; i < len; ++i) th[i] = gelu::tanh_argument(x[i]);
    detail::tanh_array(th, th, len);
#pragma omp simd
    for (int64_t i = 0; i < len; ++i) y[i] = gelu::forward_from_tanh(x[i], th[i]);
  }
}

template <typename Real>
void gelu_backward(Real* dinp, const Real* inp, const Real* dout, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i0 = 0; i0 < n; i0 += kChunk) {
    const int64_t len = std::min(kChunk, n - i0);
    const Real* x = inp + i0;
    const Real* dy = dout + i0;
    Real* dx = dinp + i0;
    Real th[kChunk];
#pragma omp simd
    for (int64_t i = 0; i < len; ++i) th[i] = gelu::tanh_argument(x[i]);
    detail::tanh_array(th, th, len);
#pragma omp simd
    for (int64_t i = 0; i < len; ++i) dx[i] += dy[i] * gelu::derivative_from_tanh(x[i], th[i]);
  }
}

template void gelu_forward<float>(float*, const float*, int64_t);
template void gelu_forward<double>(double*, const double*, int64_t);
template void gelu_backward<float>(float*, const float*, const float*, int64_t);
template void gelu_backward<double>(double*, const double*, const double*, int64_t);

}  // namespace gpt::cpu
