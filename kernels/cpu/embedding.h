// Token + position embedding, whole or a slice of the vocabulary's rows (vocabulary parallelism). Real is
// float (training) or double (gradient checks).
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

// One slice of the table: wte [rows, C] holds rows [first, first + rows). out[b,t,:] = (the token's row if
// the slice holds it, else 0) + wpe[t,:]; wpe may be null (no position term). With first = 0, every token in
// the slice and wpe given, embedding_forward bit for bit (it is implemented through this).
template <typename Real>
void embedding_forward_rows(Real* out, const int32_t* tokens, const Real* wte, int64_t first, int64_t rows,
                            const Real* wpe, int B, int T, int C);

// Accumulates dout into dwte[token - first] for the tokens in [first, first + rows), skipping the others,
// and into dwpe[t] for every position; either output may be null. The order of the sums is
// embedding_backward's (which is implemented through this).
template <typename Real>
void embedding_backward_rows(Real* dwte, int64_t first, int64_t rows, Real* dwpe, const Real* dout,
                             const int32_t* tokens, int B, int T, int C);

}  // namespace gpt::cpu
