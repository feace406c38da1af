// Softmax + cross-entropy over a vocabulary padded from V to Vp columns; padded columns are excluded
// (they get probability 0 and gradient 0).
#pragma once
#include <cstdint>

namespace gpt::cpu {

// logits [N,Vp] -> probs [N,Vp] (softmax over the first V columns; columns V..Vp-1 set to 0) and
// losses[n] = -log probs[n, targets[n]]. probs may alias logits (in place). targets must be in [0, V).
template <typename Real>
void softmax_cross_entropy_forward(Real* losses, Real* probs, const Real* logits, const int32_t* targets,
                                   int N, int V, int Vp);

// Overwrites dlogits [N,Vp] = (probs - onehot(target)) * dlosses[n] in the first V columns, 0 in the padding.
// dlogits may alias probs.
template <typename Real>
void softmax_cross_entropy_backward(Real* dlogits, const Real* probs, const int32_t* targets,
                                    const Real* dlosses, int N, int V, int Vp);

// The vocabulary-parallel form, for a rank holding columns [first, first + W) of the logits (column j is
// vocabulary entry first + j; real when first + j < V). real_columns(first, W, V) of them are real.
inline int64_t real_columns(int64_t first, int64_t W, int64_t V) {
  return V - first < 0 ? 0 : (V - first < W ? V - first : W);
}

// stats [N,3] per row: the max m of the real columns (-inf if none), sum of exp(z - m) over them (0 if none),
// and the target's logit if the slice holds the target (else 0). Computed as the forward computes them.
template <typename Real>
void cross_entropy_stats(Real* stats, const Real* logits, const int32_t* targets, int N, int W, int64_t first,
                         int V);

// From the G slices' stats [G,N,3]: M = max m_g, S = sum s_g exp(m_g - M) (over s_g > 0), z_y = sum of the
// target entries; losses[n] = log S - (z_y - M), probs [N,W] = exp(z - M) * (1/S) in the real columns, 0 in
// the padding. probs may alias logits. With G = 1 and the whole row, the forward's bits.
template <typename Real>
void cross_entropy_merge(Real* losses, Real* probs, const Real* logits, const Real* stats, int G, int N,
                         int W, int64_t first, int V);

// dlogits [N,W] = (probs - onehot(target - first)) * dlosses[n] in the real columns, 0 in the padding;
// dlogits may alias probs. softmax_cross_entropy_backward is this with first = 0, W = Vp.
template <typename Real>
void cross_entropy_backward_columns(Real* dlogits, const Real* probs, const int32_t* targets,
                                    const Real* dlosses, int N, int W, int64_t first, int V);

}  // namespace gpt::cpu
