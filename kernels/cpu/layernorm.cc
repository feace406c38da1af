// LayerNorm over the last dimension (forward and backward), CPU, templated over the scalar type.
//   forward:  mean = sum_c x_c / C;  var = sum_c (x_c - mean)^2 / C (biased);  rstd = 1/sqrt(var + eps)
//             xhat = (x - mean) rstd;  y = xhat w + b
//   backward: db += dy;  dw += dy xhat;  with g = dy w:
//             dx += rstd (g - mean_c(g) - xhat mean_c(g xhat))
#include "kernels/cpu/layernorm.h"

#include <cmath>

#include "kernels/cpu/eigen_util.h"

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
    Real sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int c = 0; c < C; ++c) sum += x[c];
    const Real m = sum * inv_c;
    Real sq = 0;
#pragma omp simd reduction(+ : sq)
    for (int c = 0; c < C; ++c) sq += (x[c] - m) * (x[c] - m);
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
      Real g_sum = 0, gx_sum = 0;
#pragma omp simd reduction(+ : g_sum, gx_sum)
      for (int c = 0; c < C; ++c) {
        const Real g = dy[c] * weight[c];
        g_sum += g;
        gx_sum += g * (x[c] - m) * s;
      }
      const Real g_mean = g_sum * inv_c, gx_mean = gx_sum * inv_c;
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
