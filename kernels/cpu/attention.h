// Causal multi-head self-attention over a fused qkv activation, with GEMMs for Q K^T and A V, and optional
// dropout of the attention probabilities.
#pragma once

#include <cstdint>

namespace gpt::cpu {

// Dropout of the attention probabilities (dropout.h's rule): probability (h, i, j) of sequence b is kept when
// uniform32(keys[b], element_offset + h*T*T + i*T + j) >= p, and scaled by 1/(1-p). A tensor-parallel rank
// whose heads start at global head h0 passes element_offset = h0*T*T and draws the masks of those heads.
struct AttentionDropout {
  double p = 0;
  const uint64_t* keys = nullptr;  // [B]: one key per sequence
  int64_t element_offset = 0;
};

// qkv is [B,T,3C]: q = qkv[..., 0:C], k = qkv[..., C:2C], v = qkv[..., 2C:3C], each split into NH heads of
// hs = C/NH channels (head h uses channels [h*hs, (h+1)*hs)). att [B,NH,T,T] receives the softmax
// probabilities of (q k^T / sqrt(hs)) with the causal mask (entries above the diagonal are 0); it is saved
// for the backward. out [B,T,C] = att v, heads concatenated. Overwrites att and out.
// With dropout (p > 0), att still holds the probabilities before dropout and out = dropout(att) v; null or
// p = 0 is exactly the call without dropout.
template <typename Real>
void attention_forward(Real* out, Real* att, const Real* qkv, int B, int T, int C, int NH,
                       const AttentionDropout* dropout = nullptr);

// Incremental decoding: out [C] is row n-1 of attention_forward's output for one sequence of T = n tokens,
// computed from that row's query and the keys and values of rows 0..n-1 of qkv [n,3C] alone (a key/value
// cache); att [NH,n] receives the row's probabilities. No dropout (decoding is inference).
template <typename Real>
void attention_decode(Real* out, Real* att, const Real* qkv, int n, int C, int NH);

// Accumulates into dqkv [B,T,3C] given dout [B,T,C] and the forward's qkv and att; dropout must be the
// forward's (the masks are regenerated, never stored).
template <typename Real>
void attention_backward(Real* dqkv, const Real* dout, const Real* qkv, const Real* att, int B, int T, int C,
                        int NH, const AttentionDropout* dropout = nullptr);

}  // namespace gpt::cpu
