// A row's softmax statistics on the GPU, shared by the cross-entropy (cross_entropy.cu) and the fused
// classifier (classifier.cu): every thread folds its columns into a running (maximum, sum of exp(z - maximum))
// pair and the pairs merge in a fixed tree (warp shuffles, then the warps in order), so a rerun gives the
// same bits. For kernels of one block per row (blockDim.x a multiple of 32, at most 1024).
#pragma once

#include <cfloat>

namespace gpt::cuda::row_softmax {

constexpr unsigned kFullMask = 0xffffffffu;

// max and sum of exp(z - max) over the values folded so far. No default member initializers: the type is
// also __shared__ storage, which takes no initialization.
struct Softmax {
  float max;
  float sum;
};

// Nothing folded yet. -FLT_MAX rather than -inf keeps exp(m - z) and exp(z - m) free of inf - inf for rows
// (or threads) with -inf logits or no columns.
__device__ __forceinline__ Softmax empty_softmax() {
  return {-FLT_MAX, 0.0f};
}

__device__ __forceinline__ void fold(Softmax& s, float z) {
  if (z > s.max) {
    s.sum = s.sum * expf(s.max - z) + 1.0f;
    s.max = z;
  } else {
    s.sum += expf(z - s.max);
  }
}

__device__ __forceinline__ Softmax merge(Softmax a, Softmax b) {
  const float m = fmaxf(a.max, b.max);
  return {m, a.sum * expf(a.max - m) + b.sum * expf(b.max - m)};
}

__device__ __forceinline__ Softmax warp_merge(Softmax s) {
  for (int offset = 16; offset > 0; offset /= 2) {
    const Softmax other{__shfl_down_sync(kFullMask, s.max, offset),
                        __shfl_down_sync(kFullMask, s.sum, offset)};
    s = merge(s, other);
  }
  return s;
}

// The row's statistics, the same in every thread of the block: a fixed tree over threads, then warps.
__device__ inline Softmax block_merge(Softmax s) {
  __shared__ Softmax warps[32];
  __shared__ Softmax total;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  s = warp_merge(s);
  if (lane == 0) warps[warp] = s;
  __syncthreads();
  if (warp == 0) {
    s = lane < static_cast<int>(blockDim.x / 32) ? warps[lane] : empty_softmax();
    s = warp_merge(s);
    if (lane == 0) total = s;
  }
  __syncthreads();
  return total;
}

// A thread's part of the row's first V columns: float4 groups q = tid, tid + blockDim, ... below V / 4, then
// (kVec4) one of the last V % 4 columns; or single columns tid, tid + blockDim, ...
template <bool kVec4>
__device__ __forceinline__ Softmax fold_row(const float* z, int V) {
  Softmax s = empty_softmax();
  if constexpr (kVec4) {
    const int groups = V / 4;
    for (int q = threadIdx.x; q < groups; q += blockDim.x) {
      const float4 v = reinterpret_cast<const float4*>(z)[q];
      fold(s, v.x);
      fold(s, v.y);
      fold(s, v.z);
      fold(s, v.w);
    }
    if (static_cast<int>(threadIdx.x) < V - 4 * groups) fold(s, z[4 * groups + threadIdx.x]);
  } else {
    for (int j = threadIdx.x; j < V; j += blockDim.x) fold(s, z[j]);
  }
  return s;
}

}  // namespace gpt::cuda::row_softmax
