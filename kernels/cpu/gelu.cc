// GELU, tanh approximation (GPT-2), forward and backward, CPU. With s = sqrt(2/pi), k = 0.044715:
//   forward:  u = s (x + k x^3);  y = x/2 (1 + tanh u)
//   backward: dx += dy [ (1 + tanh u)/2 + x/2 (1 - tanh^2 u) s (1 + 3 k x^2) ]
// tanh goes through Eigen's array math, which is vectorized (a scalar std::tanh per element would make this
// elementwise op cost as much as a GEMM-sized chunk of the step). Threads take fixed-size chunks.
#include "kernels/cpu/gelu.h"

#include <algorithm>

#include "kernels/cpu/eigen_util.h"

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
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t len = std::min(kChunk, n - i);
    const detail::ConstArrMap<Real> x(inp + i, len);
    detail::ArrMap<Real> y(out + i, len);
    y = Real(0.5) * x * (Real(1) + (s * (x + k * x.cube())).tanh());
  }
}

template <typename Real>
void gelu_backward(Real* dinp, const Real* inp, const Real* dout, int64_t n) {
  const Real s = Real(kSqrt2OverPi), k = Real(kCubic);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t len = std::min(kChunk, n - i);
    const detail::ConstArrMap<Real> x(inp + i, len), dy(dout + i, len);
    detail::ArrMap<Real> dx(dinp + i, len);
    Real th[kChunk];
    detail::ArrMap<Real> t(th, len);
    t = (s * (x + k * x.cube())).tanh();
    dx += dy * (Real(0.5) * (Real(1) + t) +
                Real(0.5) * x * (Real(1) - t.square()) * s * (Real(1) + Real(3) * k * x.square()));
  }
}

template void gelu_forward<float>(float*, const float*, int64_t);
template void gelu_forward<double>(double*, const double*, int64_t);
template void gelu_backward<float>(float*, const float*, const float*, int64_t);
template void gelu_backward<double>(double*, const double*, const double*, int64_t);

}  // namespace gpt::cpu
