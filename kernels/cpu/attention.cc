// Causal multi-head self-attention (forward and backward), CPU. Per (batch, head), with hs = C/NH:
//   forward:  S = Q K^T / sqrt(hs);  A = softmax_row(S) over j <= t (A[t,j] = 0 for j > t);  Y = A V
//   backward: dV += A^T dY;  dA = dY V^T;  dS[t,j] = A[t,j] (dA[t,j] - sum_k A[t,k] dA[t,k]);
//             dQ += dS K / sqrt(hs);  dK += dS^T Q / sqrt(hs)
// With dropout, D = M o A / (1-p) for the 0/1 mask M, and Y = D V. Backward: dV += D^T dY; dD = dY V^T;
// dA = M o dD / (1-p), so A o dA = D o dD and  dS[t,j] = D[t,j] dD[t,j] - A[t,j] sum_k D[t,k] dD[t,k]
// (the mask enters only through D, which is regenerated from the generator, never stored).
// Q, K, V, dQ, dK, dV are Eigen views with outer stride 3C straight into the fused [B,T,3C] buffers, so the
// four products are GEMMs without copies. Threads split the (batch, head) pairs, each with its own small
// scratch for dA (and D); Eigen runs the small GEMMs single-threaded inside the parallel region. A pair's
// result does not depend on which thread computes it.
#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/internal.h"

namespace gpt::cpu {
namespace {

using detail::mat;

// The dropped probabilities D of pair (b, h): rows t of A's lower triangle, masked and scaled. Entries above
// the diagonal are never written, so a zero-initialized d keeps them 0.
template <typename Real>
void drop_probabilities(Real* d, const Real* a, const AttentionDropout& dropout, int b, int h, int T) {
  const uint64_t threshold = dropout::threshold(dropout.p);
  const Real scale = dropout::scale<Real>(dropout.p);
  const uint64_t head_base = uint64_t(dropout.element_offset) + uint64_t(h) * T * T;
  for (int t = 0; t < T; ++t) {
    const int64_t row = int64_t(t) * T;
    detail::dropout_span(d + row, a + row, dropout.keys[b], head_base + uint64_t(row), t + 1, threshold,
                         scale);
  }
}

}  // namespace

template <typename Real>
void attention_forward(Real* out, Real* att, const Real* qkv, int B, int T, int C, int NH,
                       const AttentionDropout* dropout) {
  const int hs = C / NH;
  const int64_t C3 = 3 * int64_t(C);
  const Real scale = Real(1) / std::sqrt(Real(hs));
  const bool drop = dropout != nullptr && dropout->p > 0;
#pragma omp parallel
  {
    std::vector<Real> dropped(drop ? int64_t(T) * T : 0, Real(0));
#pragma omp for schedule(static)
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
      if (!drop) {
        y.noalias() = am.template triangularView<Eigen::Lower>() * v;
      } else {
        drop_probabilities(dropped.data(), a, *dropout, b, h, T);
        y.noalias() = mat(dropped.data(), T, T, T).template triangularView<Eigen::Lower>() * v;
      }
    }
  }
}

template <typename Real>
void attention_decode(Real* out, Real* att, const Real* qkv, int n, int C, int NH) {
  // The forward's arithmetic for its last row: scores by a product with the keys, then the scale; softmax
  // over the n positions; the probabilities times the values. One row is little work: no threads.
  const int hs = C / NH;
  const int64_t C3 = 3 * int64_t(C);
  const Real scale = Real(1) / std::sqrt(Real(hs));
  const Real* last = qkv + int64_t(n - 1) * C3;
  for (int h = 0; h < NH; ++h) {
    const auto q = mat(last + int64_t(h) * hs, 1, hs, C3);
    const auto k = mat(qkv + C + int64_t(h) * hs, n, hs, C3);
    const auto v = mat(qkv + 2 * int64_t(C) + int64_t(h) * hs, n, hs, C3);
    Real* a = att + int64_t(h) * n;
    auto am = mat(a, 1, n, n);
    am.noalias() = (q * k.transpose()) * scale;
    const Real inv = Real(1) / detail::exp_shifted_sum(a, a, detail::lane_max(a, n), n);
#pragma omp simd
    for (int j = 0; j < n; ++j) a[j] *= inv;
    auto y = mat(out + int64_t(h) * hs, 1, hs, C);
    y.noalias() = am * v;
  }
}

template <typename Real>
void attention_backward(Real* dqkv, const Real* dout, const Real* qkv, const Real* att, int B, int T, int C,
                        int NH, const AttentionDropout* dropout) {
  const int hs = C / NH;
  const int64_t C3 = 3 * int64_t(C);
  const Real scale = Real(1) / std::sqrt(Real(hs));
  const bool drop = dropout != nullptr && dropout->p > 0;
#pragma omp parallel
  {
    std::vector<Real> scratch(int64_t(T) * T);
    std::vector<Real> dropped(drop ? int64_t(T) * T : 0, Real(0));
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
      const Real* abase = att + int64_t(bh) * T * T;
      const auto a = mat(abase, T, T, T);
      const auto dy = mat(dout + int64_t(b) * T * C + int64_t(h) * hs, T, hs, C);
      auto ds = mat(scratch.data(), T, T, T);

      if (!drop) {
        dv.noalias() += a.transpose() * dy;
        ds.noalias() = dy * v.transpose();  // dA, turned into dS (scaled) in place below
        for (int t = 0; t < T; ++t) {
          const Real* arow = abase + int64_t(t) * T;
          Real* drow = scratch.data() + int64_t(t) * T;
          const Real dot = detail::lane_sum<Real>(t + 1, [&](int64_t j) { return arow[j] * drow[j]; });
#pragma omp simd
          for (int j = 0; j <= t; ++j) drow[j] = arow[j] * (drow[j] - dot) * scale;
          std::fill(drow + t + 1, drow + T, Real(0));
        }
      } else {
        drop_probabilities(dropped.data(), abase, *dropout, b, h, T);
        const auto d = mat(static_cast<const Real*>(dropped.data()), T, T, T);
        dv.noalias() += d.transpose() * dy;
        ds.noalias() = dy * v.transpose();  // dD, turned into dS (scaled) in place below
        for (int t = 0; t < T; ++t) {
          const Real* arow = abase + int64_t(t) * T;
          const Real* prow = dropped.data() + int64_t(t) * T;
          Real* drow = scratch.data() + int64_t(t) * T;
          const Real dot = detail::lane_sum<Real>(t + 1, [&](int64_t j) { return prow[j] * drow[j]; });
#pragma omp simd
          for (int j = 0; j <= t; ++j) drow[j] = (prow[j] * drow[j] - arow[j] * dot) * scale;
          std::fill(drow + t + 1, drow + T, Real(0));
        }
      }
      dq.noalias() += ds * k;
      dk.noalias() += ds.transpose() * q;
    }
  }
}

template void attention_forward<float>(float*, float*, const float*, int, int, int, int,
                                       const AttentionDropout*);
template void attention_forward<double>(double*, double*, const double*, int, int, int, int,
                                        const AttentionDropout*);
template void attention_decode<float>(float*, float*, const float*, int, int, int);
template void attention_decode<double>(double*, double*, const double*, int, int, int);
template void attention_backward<float>(float*, const float*, const float*, const float*, int, int, int, int,
                                        const AttentionDropout*);
template void attention_backward<double>(double*, const double*, const double*, const double*, int, int, int,
                                         int, const AttentionDropout*);

}  // namespace gpt::cpu
