// Softmax + cross-entropy over a padded vocabulary (forward and backward), CPU. Per row n, target y, over the
// first V of Vp columns (the padding gets probability 0 and gradient 0):
//   forward:  m = max_j z_j;  p_j = exp(z_j - m) / sum_k exp(z_k - m);  loss = log sum_k exp(z_k - m) - (z_y
//   - m) backward: dz_j = (p_j - [j == y]) dloss
// The loss comes from the log-sum-exp rather than -log p_y, so it stays finite when p_y underflows. Three
// streaming passes per row (max, exp + sum, scale) over a row that stays in L2; exp is Eigen's vectorized
// one.
#include "kernels/cpu/cross_entropy.h"

#include <algorithm>
#include <cmath>

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
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const Real* p = probs + int64_t(n) * Vp;
    Real* dz = dlogits + int64_t(n) * Vp;  // may alias p (elementwise, read before write)
    const Real dl = dlosses[n];
#pragma omp simd
    for (int j = 0; j < V; ++j) dz[j] = p[j] * dl;
    dz[targets[n]] -= dl;
    std::fill(dz + V, dz + Vp, Real(0));
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

}  // namespace gpt::cpu
