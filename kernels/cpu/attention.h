// Causal multi-head self-attention over a fused qkv activation, with GEMMs for Q K^T and A V.
#pragma once

namespace gpt::cpu {

// qkv is [B,T,3C]: q = qkv[..., 0:C], k = qkv[..., C:2C], v = qkv[..., 2C:3C], each split into NH heads of
// hs = C/NH channels (head h uses channels [h*hs, (h+1)*hs)). att [B,NH,T,T] receives the softmax
// probabilities of (q k^T / sqrt(hs)) with the causal mask (entries above the diagonal are 0); it is saved
// for the backward. out [B,T,C] = att v, heads concatenated. Overwrites att and out.
template <typename Real>
void attention_forward(Real* out, Real* att, const Real* qkv, int B, int T, int C, int NH);

// Accumulates into dqkv [B,T,3C] given dout [B,T,C] and the forward's qkv and att.
template <typename Real>
void attention_backward(Real* dqkv, const Real* dout, const Real* qkv, const Real* att, int B, int T, int C,
                        int NH);

}  // namespace gpt::cpu
