// FlashAttention-2 on the CPU: the oracle and readable twin of the CUDA flash-attention kernel. It computes
// what attention.h's causal attention computes (same fused qkv [B,T,3C], same dropout masks), but in the CUDA
// flash kernel's tile order and with its memory: no T x T matrix, only one log-sum-exp per row saved for the
// backward, which recomputes the probabilities tile by tile. A CUDA kernel that follows the order below
// reproduces these numbers up to exp/log (std::exp and std::log here, expf/logf or __expf there) and its own
// reduction trees.
//
// Per (sequence b, head h), hs = C/NH, scale = 1/sqrt(hs), rows i (queries) and columns j (keys), j <= i:
//   s_ij = scale * dot(q_i, k_j), the dot a chain of fma over d = 0..hs-1 ascending from 0 (then one multiply
//   by scale). keep_ij = dropout::keeps(keys[b], element_offset + h*T*T + i*T + j, threshold(p)) (as
//   attention.h); dropped(x) = keep ? x * (1/(1-p)) : 0, and x itself when p = 0.
// Every sum over keys or queries is two-level, as a GEMM tile accumulates: a tile's part starts from 0 and
// runs over the tile's indices ascending, and the parts are then added in ascending tile order (chains a tile
// long plus one step per tile, not T long: with one serial chain over T = 4096, dv was 1.6e-6 off the CPU
// attention; tiled, 6e-7).
// Forward: query tiles of kFlashRows rows, each row starting with m = -inf, l = 0, o = 0 (hs values). For
//   each key tile of kFlashCols columns at or below the diagonal (j0 <= last row of the query tile), in
//   ascending j0, each row i (its columns j0 <= j < min(j0 + Bc, i + 1); a row with none skips the tile):
//     m' = max(m, max_j s_ij); p_j = exp(s_ij - m');
//     r = 0, then r += p_j for j ascending;
//     pv_d = 0, then pv_d = fma(dropped(p_j), v_jd, pv_d) for j ascending;
//     alpha = exp(m - m') (0 on the first tile); l = fma(alpha, l, r); o_d = fma(alpha, o_d, pv_d); m = m'.
//   Then out_i,d = o_d * (1 / l) and lse_i = m + log(l). Dropout scales what multiplies V, never l.
// Backward: Dr_i = dot(dout_i, out_i) (fma chain over d ascending). dq [T, hs] = 0. Key tiles (outer,
//   ascending), each with dk = dv = 0 [Bc, hs]; for each, the query tiles that reach it (inner, ascending
//   from the tile holding j0), each a block whose parts dq', dk', dv' start at 0; in the block, rows i
//   ascending and in each row its columns j ascending (j <= i):
//     p = exp(s_ij - lse_i); dp = dot(dout_i, v_j); ds = p * (dropped(dp) - Dr_i) * scale;
//     dv'_j,d = fma(dropped(p), dout_i,d, dv'_j,d); dk'_j,d = fma(ds, q_i,d, dk'_j,d);
//     dq'_i,d = fma(ds, k_j,d, dq'_i,d);
//   then dq += dq', dk += dk', dv += dv' (element-wise). A key tile's dk and dv are added to dqkv when its
//   query tiles are done, dq when all key tiles are. A CUDA kernel that adds dq with atomics gets the key
//   tiles' order scrambled and matches only to rounding. (Why Dr: with out = dropped(P) V,
//   sum_k P_ik dA_ik = sum_k dropped(P_ik) dout_i.v_k = dout_i.out_i, so ds = P (dA - Dr) holds with dropout
//   too; dA_ij = dropped(dp_ij).)
// The library compiles with -ffp-contract=off: every fma above is an explicit std::fma, and nothing else is
// fused, so the order written is the order computed. Memory: the forward holds, per thread, one query tile's
// m, l and o, and one row's scores and pv (2 Br + Br hs + Bc + hs values); the backward, one (sequence,
// head)'s dq and Dr and one key tile's dk, dv and block parts (O(T hs + Bc hs)). Nothing is T x T.
#pragma once

#include "kernels/common/flash_tiles.h"
#include "kernels/cpu/attention.h"

namespace gpt::cpu {

// Br (query rows per tile) and Bc (key columns per tile): kernels/common/flash_tiles.h's, which the CUDA
// flash kernels use too.
inline constexpr int kFlashRows = kFlashTileRows;
inline constexpr int kFlashCols = kFlashTileCols;

// The tile sizes, changeable for tests (any positive sizes; T need not be a multiple of either).
struct FlashTiles {
  int rows = kFlashRows;
  int cols = kFlashCols;
};

// qkv [B,T,3C] as attention_forward's. Overwrites out [B,T,C] (attention_forward's out, to rounding) and
// lse [B,NH,T] (the log of the sum of exp of row i's scaled causal scores, before dropout). dropout as
// attention_forward's: null or p = 0 is no dropout.
template <typename Real>
void flash_attention_forward(Real* out, Real* lse, const Real* qkv, int B, int T, int C, int NH,
                             const AttentionDropout* dropout = nullptr, FlashTiles tiles = {});

// Accumulates into dqkv [B,T,3C] (as attention_backward) given dout [B,T,C] and the forward's qkv, out and
// lse; dropout must be the forward's (its masks are regenerated).
template <typename Real>
void flash_attention_backward(Real* dqkv, const Real* dout, const Real* qkv, const Real* out, const Real* lse,
                              int B, int T, int C, int NH, const AttentionDropout* dropout = nullptr,
                              FlashTiles tiles = {});

}  // namespace gpt::cpu
