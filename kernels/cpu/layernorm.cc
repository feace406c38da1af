// LayerNorm over the last dimension (forward and backward), CPU, templated over the scalar type.
//   forward:  mean = sum_c x_c / C;  var = sum_c (x_c - mean)^2 / C (biased);  rstd = 1/sqrt(var + eps)
//             xhat = (x - mean) rstd;  y = xhat w + b
//   backward: db += dy;  dw += dy xhat;  with g = dy w:
//             dx += rstd (g - mean_c(g) - xhat mean_c(g xhat))
#include "kernels/cpu/layernorm.h"

#include <cmath>

#include "kernels/cpu/internal.h"

namespace gpt::cpu {

template <typename Real>
void layernorm_forward(Real* out, Real* mean, Real* rstd, const Real* inp, const Real* weight,
                       const Real* bias, int N, int C) {
  const Real eps = Real(kLayerNormEps), inv_c = Real(1) / Real(C);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const Real* x = inp + int64_t(n) * C;
    Real* y = out + int64_t(n) * C;
    // Two passes over the row (it sits in L1) instead of E[x^2] - E[x]^2, which cancels badly.
    const Real m = detail::lane_sum<Real>(C, [&](int64_t c) { return x[c]; }) * inv_c;
    const Real sq = detail::lane_sum<Real>(C, [&](int64_t c) { return (x[c] - m) * (x[c] - m); });
    const Real s = Real(1) / std::sqrt(sq * inv_c + eps);
#pragma omp simd
    for (int c = 0; c < C; ++c) y[c] = (x[c] - m) * s * weight[c] + bias[c];
    mean[n] = m;
    rstd[n] = s;
  }
}

template <typename Real>
void layernorm_backward(Real* dinp, Real* dweight, Real* dbias, const Real* dout, const Real* inp,
                        const Real* weight, const Real* mean, const Real* rstd, int N, int C) {
  const Real inv_c = Real(1) / Real(C);
#pragma omp parallel
  {
    // dx: rows are independent.
#pragma omp for schedule(static)
    for (int n = 0; n < N; ++n) {
      const Real* x = inp + int64_t(n) * C;
      const Real* dy = dout + int64_t(n) * C;
      Real* dx = dinp + int64_t(n) * C;
      const Real m = mean[n], s = rstd[n];
      const Real g_mean = detail::lane_sum<Real>(C, [&](int64_t c) { return dy[c] * weight[c]; }) * inv_c;
      const Real gx_mean =
          detail::lane_sum<Real>(C, [&](int64_t c) { return dy[c] * weight[c] * (x[c] - m) * s; }) * inv_c;
#pragma omp simd
      for (int c = 0; c < C; ++c) dx[c] += s * (dy[c] * weight[c] - g_mean - (x[c] - m) * s * gx_mean);
    }
    // dw, db: sums over rows. Threads split the columns, so the order of the sum does not depend on the
    // thread count and no per-thread partial buffers are needed.
    const detail::Range r = detail::thread_range(C);
    for (int n = 0; n < N; ++n) {
      const Real* x = inp + int64_t(n) * C;
      const Real* dy = dout + int64_t(n) * C;
      const Real m = mean[n], s = rstd[n];
#pragma omp simd
      for (int64_t c = r.begin; c < r.end; ++c) {
        dweight[c] += dy[c] * (x[c] - m) * s;
        dbias[c] += dy[c];
      }
    }
  }
}

template void layernorm_forward<float>(float*, float*, float*, const float*, const float*, const float*, int,
                                       int);
template void layernorm_forward<double>(double*, double*, double*, const double*, const double*,
                                        const double*, int, int);
template void layernorm_backward<float>(float*, float*, float*, const float*, const float*, const float*,
                                        const float*, const float*, int, int);
template void layernorm_backward<double>(double*, double*, double*, const double*, const double*,
                                         const double*, const double*, const double*, int, int);

}  // namespace gpt::cpu
