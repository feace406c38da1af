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

}  // namespace gpt::cpu
