// Softmax + cross-entropy over a padded vocabulary (forward and backward), CPU. Per row n, target y, over the
// first V of Vp columns (the padding gets probability 0 and gradient 0):
//   forward:  m = max_j z_j;  p_j = exp(z_j - m) / sum_k exp(z_k - m);
//             loss = log sum_k exp(z_k - m) - (z_y - m)
//   backward: dz_j = (p_j - [j == y]) dloss
// The loss comes from the log-sum-exp rather than -log p_y, so it stays finite when p_y underflows. Three
// streaming passes per row (max, exp + sum, scale) over a row that stays in L2; exp is Eigen's vectorized
// one. The vocabulary-parallel form splits the forward at the (max, sum) statistics, which the ranks
// exchange.
#include "kernels/cpu/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/internal.h"

namespace gpt::cpu {

template <typename Real>
void softmax_cross_entropy_forward(Real* losses, Real* probs, const Real* logits, const int32_t* targets,
                                   int N, int V, int Vp) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const Real* z = logits + int64_t(n) * Vp;
    Real* p = probs + int64_t(n) * Vp;  // may be z itself: every pass reads element j before writing it
    const Real z_target = z[targets[n]];
    const Real m = detail::lane_max(z, V);
    const Real sum = detail::exp_shifted_sum(p, z, m, V);
    const Real inv = Real(1) / sum;
#pragma omp simd
    for (int j = 0; j < V; ++j) p[j] *= inv;
    std::fill(p + V, p + Vp, Real(0));
    losses[n] = std::log(sum) - (z_target - m);
  }
}

template <typename Real>
void softmax_cross_entropy_backward(Real* dlogits, const Real* probs, const int32_t* targets,
                                    const Real* dlosses, int N, int V, int Vp) {
  cross_entropy_backward_columns(dlogits, probs, targets, dlosses, N, Vp, 0, V);
}

// The vocabulary-parallel form: each rank's slice of the row gives its (max, sum of exp) pair and, where it
// holds the target, the target's logit; the pairs merge as in an online softmax. Per slice the arithmetic is
// the forward's (lane_max, exp_shifted_sum, the reciprocal), so one slice over the whole row is the forward.
template <typename Real>
void cross_entropy_stats(Real* stats, const Real* logits, const int32_t* targets, int N, int W, int64_t first,
                         int V) {
  const int64_t real = real_columns(first, W, V);
#pragma omp parallel
  {
    std::vector<Real> exps(real);  // exp_shifted_sum's by-product, not needed here
#pragma omp for schedule(static)
    for (int n = 0; n < N; ++n) {
      const Real* z = logits + int64_t(n) * W;
      Real* st = stats + int64_t(n) * 3;
      const int64_t target = int64_t(targets[n]) - first;
      st[2] = target >= 0 && target < real ? z[target] : Real(0);
      if (real == 0) {
        st[0] = -std::numeric_limits<Real>::infinity();
        st[1] = Real(0);
        continue;
      }
      st[0] = detail::lane_max(z, real);
      st[1] = detail::exp_shifted_sum(exps.data(), z, st[0], real);
    }
  }
}

template <typename Real>
void cross_entropy_merge(Real* losses, Real* probs, const Real* logits, const Real* stats, int G, int N,
                         int W, int64_t first, int V) {
  const int64_t real = real_columns(first, W, V);
  const int64_t rank_stride = int64_t(N) * 3;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    Real m = -std::numeric_limits<Real>::infinity(), sum = 0, z_target = 0;
    for (int g = 0; g < G; ++g) {
      const Real* st = stats + g * rank_stride + int64_t(n) * 3;
      if (st[1] != Real(0)) m = std::max(m, st[0]);
    }
    for (int g = 0; g < G; ++g) {
      const Real* st = stats + g * rank_stride + int64_t(n) * 3;
      if (st[1] != Real(0)) sum += st[1] * std::exp(st[0] - m);
      z_target += st[2];
    }
    const Real* z = logits + int64_t(n) * W;
    Real* p = probs + int64_t(n) * W;  // may be z: every pass reads element j before writing it
    if (real > 0) detail::exp_shifted_sum(p, z, m, real);
    const Real inv = Real(1) / sum;
#pragma omp simd
    for (int64_t j = 0; j < real; ++j) p[j] *= inv;
    std::fill(p + real, p + W, Real(0));
    losses[n] = std::log(sum) - (z_target - m);
  }
}

template <typename Real>
void cross_entropy_backward_columns(Real* dlogits, const Real* probs, const int32_t* targets,
                                    const Real* dlosses, int N, int W, int64_t first, int V) {
  const int64_t real = real_columns(first, W, V);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const Real* p = probs + int64_t(n) * W;
    Real* dz = dlogits + int64_t(n) * W;  // may alias p (elementwise, read before write)
    const Real dl = dlosses[n];
#pragma omp simd
    for (int64_t j = 0; j < real; ++j) dz[j] = p[j] * dl;
    const int64_t target = int64_t(targets[n]) - first;
    if (target >= 0 && target < real) dz[target] -= dl;
    std::fill(dz + real, dz + W, Real(0));
  }
}

template void softmax_cross_entropy_forward<float>(float*, float*, const float*, const int32_t*, int, int,
                                                   int);
template void softmax_cross_entropy_forward<double>(double*, double*, const double*, const int32_t*, int, int,
                                                    int);
template void softmax_cross_entropy_backward<float>(float*, const float*, const int32_t*, const float*, int,
                                                    int, int);
template void softmax_cross_entropy_backward<double>(double*, const double*, const int32_t*, const double*,
                                                     int, int, int);

template void cross_entropy_stats<float>(float*, const float*, const int32_t*, int, int, int64_t, int);
template void cross_entropy_stats<double>(double*, const double*, const int32_t*, int, int, int64_t, int);
template void cross_entropy_merge<float>(float*, float*, const float*, const float*, int, int, int, int64_t,
                                         int);
template void cross_entropy_merge<double>(double*, double*, const double*, const double*, int, int, int,
                                          int64_t, int);
template void cross_entropy_backward_columns<float>(float*, const float*, const int32_t*, const float*, int,
                                                    int, int64_t, int);
template void cross_entropy_backward_columns<double>(double*, const double*, const int32_t*, const double*,
                                                     int, int, int64_t, int);

}  // namespace gpt::cpu
