// LayerNorm over the last dimension, eps = 1e-5 (GPT-2's).
#pragma once

namespace gpt::cpu {

inline constexpr double kLayerNormEps = 1e-5;

// For each of N rows of C: out = (x - mean) * rstd * weight + bias, rstd = 1/sqrt(var + eps) with the
// biased variance. Saves mean[N] and rstd[N] for the backward.
template <typename Real>
void layernorm_forward(Real* out, Real* mean, Real* rstd, const Real* inp, const Real* weight,
                       const Real* bias, int N, int C);

// Accumulates into dinp [N,C], dweight [C], dbias [C].
template <typename Real>
void layernorm_backward(Real* dinp, Real* dweight, Real* dbias, const Real* dout, const Real* inp,
                        const Real* weight, const Real* mean, const Real* rstd, int N, int C);

}  // namespace gpt::cpu
