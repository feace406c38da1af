// Causal multi-head self-attention (forward and backward), CPU. Per (batch, head), with hs = C/NH:
//   forward:  S = Q K^T / sqrt(hs);  A = softmax_row(S) over j <= t (A[t,j] = 0 for j > t);  Y = A V
//   backward: dV += A^T dY;  dA = dY V^T;  dS[t,j] = A[t,j] (dA[t,j] - sum_k A[t,k] dA[t,k]);
//             dQ += dS K / sqrt(hs);  dK += dS^T Q / sqrt(hs)
// Q, K, V, dQ, dK, dV are Eigen views with outer stride 3C straight into the fused [B,T,3C] buffers, so the
// four products are GEMMs without copies. Threads split the (batch, head) pairs, each with its own small
// scratch for dA; Eigen runs the small GEMMs single-threaded inside the parallel region.
#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/internal.h"

namespace gpt::cpu {

using detail::mat;

template <typename Real>
void attention_forward(Real* out, Real* att, const Real* qkv, int B, int T, int C, int NH) {
  const int hs = C / NH;
  const int64_t C3 = 3 * int64_t(C);
  const Real scale = Real(1) / std::sqrt(Real(hs));
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < B * NH; ++bh) {
    const int b = bh / NH, h = bh % NH;
    const Real* base = qkv + int64_t(b) * T * C3 + int64_t(h) * hs;
    const auto q = mat(base, T, hs, C3);
    const auto k = mat(base + C, T, hs, C3);
    const auto v = mat(base + 2 * int64_t(C), T, hs, C3);
    Real* a = att + int64_t(bh) * T * T;
    auto am = mat(a, T, T, T);
    am.noalias() = (q * k.transpose()) * scale;
    for (int t = 0; t < T; ++t) {
      Real* row = a + int64_t(t) * T;
      const Real inv = Real(1) / detail::exp_shifted_sum(row, row, detail::lane_max(row, t + 1), t + 1);
#pragma omp simd
      for (int j = 0; j <= t; ++j) row[j] *= inv;
      std::fill(row + t + 1, row + T, Real(0));  // the causal mask
    }
    auto y = mat(out + int64_t(b) * T * C + int64_t(h) * hs, T, hs, C);
    y.noalias() = am.template triangularView<Eigen::Lower>() * v;
  }
}

template <typename Real>
void attention_backward(Real* dqkv, const Real* dout, const Real* qkv, const Real* att, int B, int T, int C,
                        int NH) {
  const int hs = C / NH;
  const int64_t C3 = 3 * int64_t(C);
  const Real scale = Real(1) / std::sqrt(Real(hs));
#pragma omp parallel
  {
    std::vector<Real> scratch(int64_t(T) * T);
#pragma omp for schedule(static)
    for (int bh = 0; bh < B * NH; ++bh) {
      const int b = bh / NH, h = bh % NH;
      const int64_t off = int64_t(b) * T * C3 + int64_t(h) * hs;
      const auto q = mat(qkv + off, T, hs, C3);
      const auto k = mat(qkv + off + C, T, hs, C3);
      const auto v = mat(qkv + off + 2 * int64_t(C), T, hs, C3);
      auto dq = mat(dqkv + off, T, hs, C3);
      auto dk = mat(dqkv + off + C, T, hs, C3);
      auto dv = mat(dqkv + off + 2 * int64_t(C), T, hs, C3);
      const auto a = mat(att + int64_t(bh) * T * T, T, T, T);
      const auto dy = mat(dout + int64_t(b) * T * C + int64_t(h) * hs, T, hs, C);
      auto ds = mat(scratch.data(), T, T, T);

      dv.noalias() += a.transpose() * dy;
      ds.noalias() = dy * v.transpose();  // dA, turned into dS (scaled) in place below
      for (int t = 0; t < T; ++t) {
        const Real* arow = att + int64_t(bh) * T * T + int64_t(t) * T;
        Real* drow = scratch.data() + int64_t(t) * T;
        const Real dot = detail::lane_sum<Real>(t + 1, [&](int64_t j) { return arow[j] * drow[j]; });
#pragma omp simd
        for (int j = 0; j <= t; ++j) drow[j] = arow[j] * (drow[j] - dot) * scale;
        std::fill(drow + t + 1, drow + T, Real(0));
      }
      dq.noalias() += ds * k;
      dk.noalias() += ds.transpose() * q;
    }
  }
}

template void attention_forward<float>(float*, float*, const float*, int, int, int, int);
template void attention_forward<double>(double*, double*, const double*, int, int, int, int);
template void attention_backward<float>(float*, const float*, const float*, const float*, int, int, int, int);
template void attention_backward<double>(double*, const double*, const double*, const double*, int, int, int,
                                         int);

}  // namespace gpt::cpu
