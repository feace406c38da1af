// Token + position embedding. Real is float (training) or double (gradient checks).
#pragma once
#include <cstdint>

namespace gpt::cpu {

// out[b,t,:] = wte[tokens[b,t], :] + wpe[t, :]; out is [B,T,C], wte [Vp,C], wpe [maxT,C].
template <typename Real>
void embedding_forward(Real* out, const int32_t* tokens, const Real* wte, const Real* wpe, int B, int T,
                       int C);

// Accumulates: dwte[tokens[b,t], :] += dout[b,t,:]; dwpe[t,:] += dout[b,t,:]. Either output may be null.
template <typename Real>
void embedding_backward(Real* dwte, Real* dwpe, const Real* dout, const int32_t* tokens, int B, int T, int C);

}  // namespace gpt::cpu
