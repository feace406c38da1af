// Causal multi-head attention kernels in fp32: the forward (scores, softmax, att and out = dropout(att) v in
// one kernel per (sequence, head, block of 64 query rows)), the backward (two kernels: dQ per query block,
// then dK and dV per key block, each a fixed-order loop, so no atomics) and the one-row decode.
//
// Tiles: 64 query rows by 64 key columns, 256 threads as 16 x 16; thread (ty, tx) owns rows ty + 16 i and
// columns tx + 16 j (i, j < 4) of a score tile, so each row lives in one half-warp and its max and sum are
// half-warp shuffles. [64, hs] tiles of q, k, v and dout sit in shared memory with an odd row stride (16
// threads reading one channel of 16 rows hit 16 banks). Output tiles [64, hs] are register accumulators,
// thread (ty, tx) holding channels tx + 16 k of rows ty + 16 i; kDims = channels per thread is a template
// argument (head sizes up to 16 kDims).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "kernels/common/dropout_bits.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_dropout.cuh"
#include "kernels/cuda/attention_gemm.h"

namespace gpt::cuda {
namespace {

constexpr int kTile = 64;                  // query rows and key columns of a tile
constexpr int kLanes = 16;                 // threads along a tile's columns; a half-warp shares rows
constexpr int kThreads = kLanes * kLanes;  // 256
constexpr int kPer = kTile / kLanes;       // rows (and columns) of a tile per thread
constexpr int kCoefLd = kTile + 1;         // row stride of the [64, 64] probability / gradient tiles
constexpr int kDecodeThreads = 256;
constexpr unsigned kFullMask = 0xffffffffu;

// Blocks per SM the tile kernels are compiled for: two (at most 128 registers a thread) for head sizes up
// to 64; one above, where the [64, hs] shared-memory tiles leave room for only one block per SM anyway and
// the accumulators want more registers.
constexpr int min_blocks(int dims) {
  return dims >= 8 ? 1 : 2;
}

struct Shape {
  int T, C, NH, hs;
  int ld;       // row stride of the [64, hs] tiles in shared memory: hs rounded up to an odd number
  float scale;  // 1/sqrt(hs), rounded as the CPU rounds it
};

struct Tiles {  // thread coordinates inside a tile
  int ty, tx;
};

__device__ __forceinline__ float half_warp_max(float v) {
#pragma unroll
  for (int offset = kLanes / 2; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, offset));
  return v;
}

// A butterfly: every lane ends with the same bits (each step adds the same two partial sums).
__device__ __forceinline__ float half_warp_sum(float v) {
#pragma unroll
  for (int offset = kLanes / 2; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

// Rows row0..row0+63 of a slice with row stride `stride` into tile[r * ld + d], d < hs; rows at or past
// `rows` become zeros.
__device__ void load_tile(float* tile, int ld, const float* src, int64_t stride, int row0, int rows, int hs) {
  for (int idx = threadIdx.x; idx < kTile * hs; idx += kThreads) {
    const int r = idx / hs, d = idx - r * hs;
    const int row = row0 + r;
    tile[r * ld + d] = row < rows ? src[int64_t(row) * stride + d] : 0.0f;
  }
}

// dots[i][j] = sum over d of a[row ty+16i][d] * b[row tx+16j][d], d in order, fp32.
__device__ __forceinline__ void tile_dots(float (&dots)[kPer][kPer], const float* a, const float* b, int ld,
                                          int hs, Tiles t) {
#pragma unroll
  for (int i = 0; i < kPer; ++i)
#pragma unroll
    for (int j = 0; j < kPer; ++j) dots[i][j] = 0.0f;
  for (int d = 0; d < hs; ++d) {
    float av[kPer], bv[kPer];
#pragma unroll
    for (int i = 0; i < kPer; ++i) av[i] = a[(t.ty + kLanes * i) * ld + d];
#pragma unroll
    for (int j = 0; j < kPer; ++j) bv[j] = b[(t.tx + kLanes * j) * ld + d];
#pragma unroll
    for (int i = 0; i < kPer; ++i)
#pragma unroll
      for (int j = 0; j < kPer; ++j) dots[i][j] = fmaf(av[i], bv[j], dots[i][j]);
  }
}

// acc[i][k] += sum over c of coef[row ty+16i][c] * rows[c][channel tx+16k], c in order (channels < hs).
template <int kDims>
__device__ __forceinline__ void accumulate_product(float (&acc)[kPer][kDims], const float* coef,
                                                   const float* rows, int ld, int hs, Tiles t) {
  for (int c = 0; c < kTile; ++c) {
    float cv[kPer];
#pragma unroll
    for (int i = 0; i < kPer; ++i) cv[i] = coef[(t.ty + kLanes * i) * kCoefLd + c];
#pragma unroll
    for (int k = 0; k < kDims; ++k) {
      const int d = t.tx + kLanes * k;
      if (d < hs) {
        const float value = rows[c * ld + d];
#pragma unroll
        for (int i = 0; i < kPer; ++i) acc[i][k] = fmaf(cv[i], value, acc[i][k]);
      }
    }
  }
}

// dst[row q0+ty+16i][channel tx+16k] (+)= acc, rows below T, channels below hs; row stride `stride`.
template <bool kAccumulate, int kDims>
__device__ __forceinline__ void store_rows(float* dst, int64_t stride, const float (&acc)[kPer][kDims],
                                           int row0, const Shape& s, Tiles t) {
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int row = row0 + t.ty + kLanes * i;
    if (row >= s.T) continue;
#pragma unroll
    for (int k = 0; k < kDims; ++k) {
      const int d = t.tx + kLanes * k;
      if (d >= s.hs) continue;
      float* p = dst + int64_t(row) * stride + d;
      *p = kAccumulate ? *p + acc[i][k] : acc[i][k];
    }
  }
}

// The scaled scores (q . k) * scale of a tile, -inf above the diagonal (the causal mask).
__device__ __forceinline__ void masked_scores(float (&sc)[kPer][kPer], const float* q_tile,
                                              const float* k_tile, const Shape& s, int q0, int k0, Tiles t) {
  tile_dots(sc, q_tile, k_tile, s.ld, s.hs, t);
#pragma unroll
  for (int i = 0; i < kPer; ++i)
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int row = q0 + t.ty + kLanes * i, col = k0 + t.tx + kLanes * j;
      sc[i][j] = col <= row ? sc[i][j] * s.scale : -INFINITY;
    }
}

// Dropout's value of probability a at (row, col) of head h: a * scale where the mask keeps it, else 0.
__device__ __forceinline__ float dropped(float a, const AttentionDropParams& drop, uint64_t key, int h,
                                         int row, int col, int T) {
  if (!drop.active) return a;
  const uint64_t counter = drop.offset + uint64_t(h) * T * T + uint64_t(row) * T + uint64_t(col);
  return dropout::keeps(key, counter, drop.threshold) ? a * drop.scale : 0.0f;
}

// The forward's first pass: per row, the max of its scores and the sum of exp(score - max), online over the
// key tiles in order.
__device__ void softmax_statistics(float (&row_max)[kPer], float (&row_sum)[kPer], const float* q_tile,
                                   float* k_tile, const float* k, const Shape& s, int q0, int last_tile,
                                   Tiles t) {
#pragma unroll
  for (int i = 0; i < kPer; ++i) row_max[i] = -INFINITY, row_sum[i] = 0.0f;
  for (int kt = 0; kt <= last_tile; ++kt) {
    __syncthreads();  // the previous key tile is used up
    load_tile(k_tile, s.ld, k, 3 * int64_t(s.C), kt * kTile, s.T, s.hs);
    __syncthreads();
    float sc[kPer][kPer];
    masked_scores(sc, q_tile, k_tile, s, q0, kt * kTile, t);
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      float tile_max = sc[i][0];
#pragma unroll
      for (int j = 1; j < kPer; ++j) tile_max = fmaxf(tile_max, sc[i][j]);
      // Finite: key column kt*64 <= q0 <= every row of the block is never masked.
      const float new_max = fmaxf(row_max[i], half_warp_max(tile_max));
      float tile_sum = 0.0f;
#pragma unroll
      for (int j = 0; j < kPer; ++j) tile_sum += expf(sc[i][j] - new_max);
      row_sum[i] = row_sum[i] * expf(row_max[i] - new_max) + half_warp_sum(tile_sum);
      row_max[i] = new_max;
    }
  }
}

// Shared-memory tiles of the forward.
struct ForwardTiles {
  float *q, *k, *v, *p;
};

// The forward's second pass: the probabilities exp(score - max) * (1/sum) of each key tile go to att (rows
// and columns below T); their dropped values to the p tile; acc += p v.
template <int kDims>
__device__ void weighted_values(float (&acc)[kPer][kDims], float* att_bh, const float (&row_max)[kPer],
                                const float (&inv_sum)[kPer], ForwardTiles tiles, const float* k,
                                const float* v, const Shape& s, const AttentionDropParams& drop, uint64_t key,
                                int h, int q0, int last_tile, Tiles t) {
  for (int kt = 0; kt <= last_tile; ++kt) {
    const int k0 = kt * kTile;
    __syncthreads();  // the previous k, v and p tiles are used up
    load_tile(tiles.k, s.ld, k, 3 * int64_t(s.C), k0, s.T, s.hs);
    load_tile(tiles.v, s.ld, v, 3 * int64_t(s.C), k0, s.T, s.hs);
    __syncthreads();
    float sc[kPer][kPer];
    masked_scores(sc, tiles.q, tiles.k, s, q0, k0, t);
#pragma unroll
    for (int i = 0; i < kPer; ++i)
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
        const int r = t.ty + kLanes * i, c = t.tx + kLanes * j, row = q0 + r, col = k0 + c;
        const float prob = expf(sc[i][j] - row_max[i]) * inv_sum[i];  // 0 above the diagonal
        if (row < s.T && col < s.T) att_bh[int64_t(row) * s.T + col] = prob;
        tiles.p[r * kCoefLd + c] = col <= row ? dropped(prob, drop, key, h, row, col, s.T) : 0.0f;
      }
    __syncthreads();
    accumulate_product(acc, tiles.p, tiles.v, s.ld, s.hs, t);
  }
}

// Zeros in att's rows q0..q0+63 from column col0 on: the causal mask beyond the key tiles computed.
__device__ void zero_beyond(float* att_bh, int T, int q0, int col0) {
  const int rows = min(kTile, T - q0), cols = T - col0;
  for (int r = 0; r < rows; ++r)
    for (int c = threadIdx.x; c < cols; c += kThreads) att_bh[int64_t(q0 + r) * T + col0 + c] = 0.0f;
}

// One block per (query tile, head, sequence b0 + blockIdx.z); the longest rows (the last tiles) first.
template <int kDims>
__global__ void __launch_bounds__(kThreads, min_blocks(kDims))
    attention_forward_kernel(float* out, float* att, const float* qkv, Shape s, int b0,
                             const __grid_constant__ AttentionDropParams drop) {
  extern __shared__ float smem[];
  const ForwardTiles tiles{smem, smem + kTile * s.ld, smem + 2 * kTile * s.ld, smem + 3 * kTile * s.ld};
  const Tiles t{int(threadIdx.x) / kLanes, int(threadIdx.x) % kLanes};
  const int qt = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = b0 + blockIdx.z;
  const int q0 = qt * kTile;
  const int64_t C3 = 3 * int64_t(s.C);
  const float* q = qkv + int64_t(b) * s.T * C3 + int64_t(h) * s.hs;
  float* att_bh = att + (int64_t(b) * s.NH + h) * s.T * s.T;
  const uint64_t key = drop.active ? drop.keys[blockIdx.z] : 0;

  load_tile(tiles.q, s.ld, q, C3, q0, s.T, s.hs);
  float row_max[kPer], row_sum[kPer], inv_sum[kPer];
  softmax_statistics(row_max, row_sum, tiles.q, tiles.k, q + s.C, s, q0, qt, t);
#pragma unroll
  for (int i = 0; i < kPer; ++i) inv_sum[i] = 1.0f / row_sum[i];
  float acc[kPer][kDims] = {};
  weighted_values(acc, att_bh, row_max, inv_sum, tiles, q + s.C, q + 2 * s.C, s, drop, key, h, q0, qt, t);
  zero_beyond(att_bh, s.T, q0, (qt + 1) * kTile);
  store_rows<false>(out + int64_t(b) * s.T * s.C + int64_t(h) * s.hs, s.C, acc, q0, s, t);
}

// The CPU's dS of one probability a with upstream gradient da (dA, or dD with dropout; d the dropped value)
// and its row's dot: a (da - dot) scale, or (d da - a dot) scale.
__device__ __forceinline__ float score_gradient(float a, float d, float da, float dot, bool drop,
                                                float scale) {
  return drop ? (d * da - a * dot) * scale : a * (da - dot) * scale;
}

// Per query row, sum over its keys of D dD (A dA without dropout), dD = dout v^T: the row term of the
// softmax Jacobian. Partial sums per thread in key order, then a half-warp butterfly.
__device__ void jacobian_row_dots(float (&dot)[kPer], const float* dy_tile, float* v_tile, const float* v,
                                  const float* att_bh, const Shape& s, const AttentionDropParams& drop,
                                  uint64_t key, int h, int q0, int last_tile, Tiles t) {
  float partial[kPer] = {};
  for (int kt = 0; kt <= last_tile; ++kt) {
    const int k0 = kt * kTile;
    __syncthreads();
    load_tile(v_tile, s.ld, v, 3 * int64_t(s.C), k0, s.T, s.hs);
    __syncthreads();
    float da[kPer][kPer];
    tile_dots(da, dy_tile, v_tile, s.ld, s.hs, t);
#pragma unroll
    for (int i = 0; i < kPer; ++i)
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
        const int row = q0 + t.ty + kLanes * i, col = k0 + t.tx + kLanes * j;
        if (col > row || row >= s.T) continue;
        const float a = att_bh[int64_t(row) * s.T + col];
        partial[i] = fmaf(dropped(a, drop, key, h, row, col, s.T), da[i][j], partial[i]);
      }
  }
#pragma unroll
  for (int i = 0; i < kPer; ++i) dot[i] = half_warp_sum(partial[i]);
}

// dS of a score tile into ds_tile[query][key] (zeros where masked), from dA = dout v^T and att.
__device__ __forceinline__ void score_gradient_tile(float* ds_tile, const float (&da)[kPer][kPer],
                                                    const float (&dot)[kPer], const float* att_bh,
                                                    const Shape& s, const AttentionDropParams& drop,
                                                    uint64_t key, int h, int q0, int k0, Tiles t) {
#pragma unroll
  for (int i = 0; i < kPer; ++i)
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int r = t.ty + kLanes * i, c = t.tx + kLanes * j, row = q0 + r, col = k0 + c;
      float ds = 0.0f;
      if (col <= row && row < s.T) {
        const float a = att_bh[int64_t(row) * s.T + col];
        const float d = dropped(a, drop, key, h, row, col, s.T);
        ds = score_gradient(a, d, da[i][j], dot[i], drop.active, s.scale);
      }
      ds_tile[r * kCoefLd + c] = ds;
    }
}

// Backward, per (query tile, head, sequence): the Jacobian row dots (stored for the key kernel), then
// dq += dS k over the key tiles in order.
template <int kDims>
__global__ void __launch_bounds__(kThreads, min_blocks(kDims))
    attention_backward_query_kernel(float* dqkv, float* row_dots, const float* dout, const float* qkv,
                                    const float* att, Shape s, int b0,
                                    const __grid_constant__ AttentionDropParams drop) {
  extern __shared__ float smem[];
  float *dy_tile = smem, *k_tile = smem + kTile * s.ld, *v_tile = smem + 2 * kTile * s.ld;
  float* ds_tile = smem + 3 * kTile * s.ld;
  const Tiles t{int(threadIdx.x) / kLanes, int(threadIdx.x) % kLanes};
  const int qt = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = b0 + blockIdx.z;
  const int q0 = qt * kTile;
  const int64_t C3 = 3 * int64_t(s.C), head = int64_t(h) * s.hs, seq = int64_t(b) * s.T;
  const float* k = qkv + seq * C3 + s.C + head;
  const float* v = k + s.C;
  const float* att_bh = att + (int64_t(b) * s.NH + h) * s.T * s.T;
  const uint64_t key = drop.active ? drop.keys[blockIdx.z] : 0;

  load_tile(dy_tile, s.ld, dout + seq * s.C + head, s.C, q0, s.T, s.hs);
  float dot[kPer];
  jacobian_row_dots(dot, dy_tile, v_tile, v, att_bh, s, drop, key, h, q0, qt, t);
  float* dots_bh = row_dots + (int64_t(b) * s.NH + h) * s.T;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int row = q0 + t.ty + kLanes * i;
    if (t.tx == 0 && row < s.T) dots_bh[row] = dot[i];
  }
  float acc[kPer][kDims] = {};
  for (int kt = 0; kt <= qt; ++kt) {
    const int k0 = kt * kTile;
    __syncthreads();
    load_tile(k_tile, s.ld, k, C3, k0, s.T, s.hs);
    load_tile(v_tile, s.ld, v, C3, k0, s.T, s.hs);
    __syncthreads();
    float da[kPer][kPer];
    tile_dots(da, dy_tile, v_tile, s.ld, s.hs, t);
    score_gradient_tile(ds_tile, da, dot, att_bh, s, drop, key, h, q0, k0, t);
    __syncthreads();
    accumulate_product(acc, ds_tile, k_tile, s.ld, s.hs, t);
  }
  store_rows<true>(dqkv + seq * C3 + head, C3, acc, q0, s, t);
}

// Shared-memory tiles of the key kernel: v of the block's keys; q, dout and the row dots of one query tile;
// the dropped probabilities and dS of the tile, transposed ([key][query]).
struct KeyTiles {
  float *v, *q, *dy, *d_t, *ds_t, *dots;
};

// One query tile's contribution to the key kernel: D^T and dS^T of the (query, key) tile into shared memory.
__device__ void transposed_gradients(KeyTiles tiles, const float* att_bh, const Shape& s,
                                     const AttentionDropParams& drop, uint64_t key, int h, int q0, int k0,
                                     Tiles t) {
  float da[kPer][kPer];  // query row q0 + ty + 16 i, key k0 + tx + 16 j
  tile_dots(da, tiles.dy, tiles.v, s.ld, s.hs, t);
#pragma unroll
  for (int i = 0; i < kPer; ++i)
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int r = t.ty + kLanes * i, c = t.tx + kLanes * j, row = q0 + r, col = k0 + c;
      float d = 0.0f, ds = 0.0f;
      if (col <= row && row < s.T) {
        const float a = att_bh[int64_t(row) * s.T + col];
        d = dropped(a, drop, key, h, row, col, s.T);
        ds = score_gradient(a, d, da[i][j], tiles.dots[r], drop.active, s.scale);
      }
      tiles.d_t[c * kCoefLd + r] = d;
      tiles.ds_t[c * kCoefLd + r] = ds;
    }
}

// Backward, per (key tile, head, sequence): dv += D^T dout and dk += dS^T q over the query tiles from the
// diagonal down, in order. The first key tiles see the most query tiles, and run first.
template <int kDims>
__global__ void __launch_bounds__(kThreads, min_blocks(kDims))
    attention_backward_key_kernel(float* dqkv, const float* row_dots, const float* dout, const float* qkv,
                                  const float* att, Shape s, int b0,
                                  const __grid_constant__ AttentionDropParams drop) {
  extern __shared__ float smem[];
  const int tile_floats = kTile * s.ld, coef_floats = kTile * kCoefLd;
  const KeyTiles tiles{smem,
                       smem + tile_floats,
                       smem + 2 * tile_floats,
                       smem + 3 * tile_floats,
                       smem + 3 * tile_floats + coef_floats,
                       smem + 3 * tile_floats + 2 * coef_floats};
  const Tiles t{int(threadIdx.x) / kLanes, int(threadIdx.x) % kLanes};
  const int kt = blockIdx.x, h = blockIdx.y, b = b0 + blockIdx.z;
  const int k0 = kt * kTile;
  const int64_t C3 = 3 * int64_t(s.C), head = int64_t(h) * s.hs, seq = int64_t(b) * s.T;
  const float* q = qkv + seq * C3 + head;
  const float* dy = dout + seq * s.C + head;
  const float* att_bh = att + (int64_t(b) * s.NH + h) * s.T * s.T;
  const float* dots_bh = row_dots + (int64_t(b) * s.NH + h) * s.T;
  const uint64_t key = drop.active ? drop.keys[blockIdx.z] : 0;

  load_tile(tiles.v, s.ld, q + 2 * s.C, C3, k0, s.T, s.hs);
  float dk[kPer][kDims] = {}, dv[kPer][kDims] = {};
  for (int qt = kt; qt < int(gridDim.x); ++qt) {
    const int q0 = qt * kTile;
    __syncthreads();
    load_tile(tiles.q, s.ld, q, C3, q0, s.T, s.hs);
    load_tile(tiles.dy, s.ld, dy, s.C, q0, s.T, s.hs);
    const int r = threadIdx.x;
    if (r < kTile) tiles.dots[r] = q0 + r < s.T ? dots_bh[q0 + r] : 0.0f;
    __syncthreads();
    transposed_gradients(tiles, att_bh, s, drop, key, h, q0, k0, t);
    __syncthreads();
    accumulate_product(dv, tiles.d_t, tiles.dy, s.ld, s.hs, t);
    accumulate_product(dk, tiles.ds_t, tiles.q, s.ld, s.hs, t);
  }
  store_rows<true>(dqkv + seq * C3 + s.C + head, C3, dk, k0, s, t);
  store_rows<true>(dqkv + seq * C3 + 2 * s.C + head, C3, dv, k0, s, t);
}

// Block-wide reductions of the decode kernel, in a fixed order; every thread gets the result.
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

template <bool kMax>
__device__ float block_reduce(float v, float* scratch) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float other = __shfl_xor_sync(kFullMask, v, offset);
    v = kMax ? fmaxf(v, other) : v + other;
  }
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
  float result = scratch[0];
  for (int w = 1; w < kDecodeThreads / 32; ++w)
    result = kMax ? fmaxf(result, scratch[w]) : result + scratch[w];
  __syncthreads();  // scratch may be reused
  return result;
}

// One block per head: scores (one warp per key) into att, the softmax in place, then out = att v with the
// keys split among `groups` thread groups whose partial sums are added in group order.
__global__ void __launch_bounds__(kDecodeThreads)
    attention_decode_kernel(float* out, float* att, const float* qkv, int n, int C, int hs, float scale) {
  extern __shared__ float smem[];
  const int groups = max(1, kDecodeThreads / hs);
  float *q_s = smem, *scratch = smem + hs, *partial = smem + hs + 32;
  const int h = blockIdx.x, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t C3 = 3 * int64_t(C);
  const float* k = qkv + C + int64_t(h) * hs;
  const float* v = k + C;
  float* a = att + int64_t(h) * n;
  for (int d = threadIdx.x; d < hs; d += kDecodeThreads)
    q_s[d] = qkv[int64_t(n - 1) * C3 + int64_t(h) * hs + d];
  __syncthreads();
  float local_max = -INFINITY;
  for (int j = warp; j < n; j += kDecodeThreads / 32) {
    float dot = 0.0f;
    for (int d = lane; d < hs; d += 32) dot = fmaf(q_s[d], k[int64_t(j) * C3 + d], dot);
    const float score = warp_sum(dot) * scale;
    if (lane == 0) a[j] = score;
    local_max = fmaxf(local_max, score);
  }
  const float row_max = block_reduce<true>(local_max, scratch);  // its barrier publishes the scores
  float local_sum = 0.0f;
  for (int j = threadIdx.x; j < n; j += kDecodeThreads) {
    const float e = expf(a[j] - row_max);
    a[j] = e;
    local_sum += e;
  }
  const float inv = 1.0f / block_reduce<false>(local_sum, scratch);
  for (int j = threadIdx.x; j < n; j += kDecodeThreads) a[j] *= inv;
  __syncthreads();
  for (int idx = threadIdx.x; idx < groups * hs; idx += kDecodeThreads) {
    const int g = idx / hs, d = idx - g * hs;
    float acc = 0.0f;
    for (int j = g; j < n; j += groups) acc = fmaf(a[j], v[int64_t(j) * C3 + d], acc);
    partial[idx] = acc;
  }
  __syncthreads();
  for (int d = threadIdx.x; d < hs; d += kDecodeThreads) {
    float y = partial[d];
    for (int g = 1; g < groups; ++g) y += partial[g * hs + d];
    out[int64_t(h) * hs + d] = y;
  }
}

// Whether a dropout mask is drawn: without one attention runs as batched GEMMs (attention_gemm.h), on the
// matrix units when the context asks for them; with one, on the handwritten kernels above.
bool drops(const AttentionDropout* dropout) {
  return dropout != nullptr && dropout->p > 0;
}

void check_heads(int C, int NH) {
  if (NH <= 0 || C <= 0 || C % NH != 0)
    throw CudaError("attention: C = " + std::to_string(C) +
                    " is not a positive multiple of NH = " + std::to_string(NH));
}

Shape make_shape(int T, int C, int NH) {
  check_heads(C, NH);
  const int hs = C / NH;
  if (hs > kMaxAttentionHeadSize)
    throw CudaError("attention: head size " + std::to_string(hs) + " is above the CUDA kernels' limit of " +
                    std::to_string(kMaxAttentionHeadSize));
  return Shape{T, C, NH, hs, hs | 1, 1.0f / std::sqrt(float(hs))};
}

// Calls f(std::integral_constant<int, kDims>) for the fewest channels per thread that cover hs.
template <typename F>
void with_dims(int hs, F&& f) {
  if (hs <= 16) {
    f(std::integral_constant<int, 1>{});
  } else if (hs <= 32) {
    f(std::integral_constant<int, 2>{});
  } else if (hs <= 64) {
    f(std::integral_constant<int, 4>{});
  } else {
    f(std::integral_constant<int, 8>{});
  }
}

template <typename Kernel>
void allow_shared_memory(Kernel* kernel, size_t bytes) {
  GPT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
}

int tiles_of(int T) {
  return (T + kTile - 1) / kTile;
}

}  // namespace

void attention_forward(const Context& ctx, float* out, float* att, const float* qkv, int B, int T, int C,
                       int NH, const AttentionDropout* dropout) {
  if (B > 0 && T > 0 && !drops(dropout)) {
    check_heads(C, NH);
    attention_forward_gemm(ctx, out, att, qkv, B, T, C, NH);
    return;
  }
  const Shape s = make_shape(T, C, NH);
  if (B <= 0 || T <= 0) return;
  with_dims(s.hs, [&](auto dims) {
    auto* kernel = attention_forward_kernel<decltype(dims)::value>;
    const size_t smem = sizeof(float) * (3 * kTile * s.ld + kTile * kCoefLd);
    allow_shared_memory(kernel, smem);
    for_each_dropout_chunk("attention", B, dropout, [&](int b0, int count, const AttentionDropParams& drop) {
      const dim3 grid(tiles_of(T), NH, count);
      kernel<<<grid, kThreads, smem, ctx.stream()>>>(out, att, qkv, s, b0, drop);
      GPT_CUDA_CHECK(cudaGetLastError());
    });
  });
}

void attention_decode(const Context& ctx, float* out, float* att, const float* qkv, int n, int C, int NH) {
  if (NH <= 0 || C <= 0 || C % NH != 0)
    throw CudaError("attention_decode: C = " + std::to_string(C) +
                    " is not a positive multiple of NH = " + std::to_string(NH));
  if (n <= 0) return;
  const int hs = C / NH, groups = std::max(1, kDecodeThreads / hs);
  const size_t smem = sizeof(float) * (hs + 32 + size_t(groups) * hs);
  allow_shared_memory(attention_decode_kernel, smem);
  attention_decode_kernel<<<NH, kDecodeThreads, smem, ctx.stream()>>>(out, att, qkv, n, C, hs,
                                                                      1.0f / std::sqrt(float(hs)));
  GPT_CUDA_CHECK(cudaGetLastError());
}

void attention_backward(const Context& ctx, float* dqkv, const float* dout, const float* qkv,
                        const float* att, int B, int T, int C, int NH, const AttentionDropout* dropout) {
  if (B > 0 && T > 0 && !drops(dropout)) {
    check_heads(C, NH);
    attention_backward_gemm(ctx, dqkv, dout, qkv, att, B, T, C, NH);
    return;
  }
  const Shape s = make_shape(T, C, NH);
  if (B <= 0 || T <= 0) return;
  StreamScratch row_dots(ctx, sizeof(float) * size_t(B) * NH * T);
  with_dims(s.hs, [&](auto dims) {
    auto* query_kernel = attention_backward_query_kernel<decltype(dims)::value>;
    auto* key_kernel = attention_backward_key_kernel<decltype(dims)::value>;
    const size_t query_smem = sizeof(float) * (3 * kTile * s.ld + kTile * kCoefLd);
    const size_t key_smem = sizeof(float) * (3 * kTile * s.ld + 2 * kTile * kCoefLd + kTile);
    allow_shared_memory(query_kernel, query_smem);
    allow_shared_memory(key_kernel, key_smem);
    for_each_dropout_chunk("attention", B, dropout, [&](int b0, int count, const AttentionDropParams& drop) {
      const dim3 grid(tiles_of(T), NH, count);
      query_kernel<<<grid, kThreads, query_smem, ctx.stream()>>>(dqkv, row_dots.as<float>(), dout, qkv, att,
                                                                 s, b0, drop);
      GPT_CUDA_CHECK(cudaGetLastError());
      key_kernel<<<grid, kThreads, key_smem, ctx.stream()>>>(dqkv, row_dots.as<float>(), dout, qkv, att, s,
                                                             b0, drop);
      GPT_CUDA_CHECK(cudaGetLastError());
    });
  });
}

}  // namespace gpt::cuda
