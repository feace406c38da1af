// Fully connected layer (forward and backward) as Eigen GEMMs over row-major buffers, CPU.
//   forward:  Y[N,OC] = X[N,C] W[OC,C]^T + b
//   backward: dX += dY W;  dW += dY^T X;  db += sum_n dY[n,:]
// Products are written with noalias() and += so Eigen accumulates straight into the destination (beta = 1)
// instead of building a temporary; Eigen splits each GEMM among the OpenMP threads itself.
#include "kernels/cpu/linear.h"

#include "kernels/cpu/internal.h"

namespace gpt::cpu {

using detail::mat;

template <typename Real>
void linear_forward(Real* out, const Real* inp, const Real* weight, const Real* bias, int N, int C, int OC) {
  auto y = mat(out, N, OC, OC);
  const auto x = mat(inp, N, C, C);
  const auto w = mat(weight, OC, C, C);
  if (bias) {
    // Start from the bias and let the GEMM accumulate onto it: one pass over Y instead of two.
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; ++n) {
      Real* row = out + int64_t(n) * OC;
#pragma omp simd
      for (int o = 0; o < OC; ++o) row[o] = bias[o];
    }
    y.noalias() += x * w.transpose();
  } else {
    y.noalias() = x * w.transpose();
  }
}

template <typename Real>
void linear_backward(Real* dinp, Real* dweight, Real* dbias, const Real* dout, const Real* inp,
                     const Real* weight, int N, int C, int OC) {
  const auto dy = mat(dout, N, OC, OC);
  const auto x = mat(inp, N, C, C);
  const auto w = mat(weight, OC, C, C);
  if (dinp) {
    auto dx = mat(dinp, N, C, C);
    dx.noalias() += dy * w;
  }
  auto dw = mat(dweight, OC, C, C);
  dw.noalias() += dy.transpose() * x;
  if (dbias) {
    // Column sums with threads owning columns: deterministic for any thread count.
#pragma omp parallel
    {
      const detail::Range r = detail::thread_range(OC);
      for (int n = 0; n < N; ++n) {
        const Real* row = dout + int64_t(n) * OC;
#pragma omp simd
        for (int64_t o = r.begin; o < r.end; ++o) dbias[o] += row[o];
      }
    }
  }
}

template void linear_forward<float>(float*, const float*, const float*, const float*, int, int, int);
template void linear_forward<double>(double*, const double*, const double*, const double*, int, int, int);
template void linear_backward<float>(float*, float*, float*, const float*, const float*, const float*, int,
                                     int, int);
template void linear_backward<double>(double*, double*, double*, const double*, const double*, const double*,
                                      int, int, int);

}  // namespace gpt::cpu
