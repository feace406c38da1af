// The fused classifier's kernels (see classifier.h). One block per row: every thread folds its columns into
// a running (maximum, sum of exp(z - maximum)) pair, the pairs merge in a fixed tree (warp shuffles, then
// the warps in order), so a rerun gives the same bits; the gradient pass then writes each column from the
// value it read, p = exp(z - m) * (1 / sum), then p * dl (- dl at the target), cross_entropy.cu's roundings.
// The reduction helpers repeat cross_entropy.cu's (file-local there) so that file stays untouched.
#include <cfloat>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/classifier.h"
#include "kernels/cuda/dtype.cuh"

namespace gpt::cuda {
namespace {

constexpr int kThreads = 512;
constexpr unsigned kFullMask = 0xffffffffu;

// No default member initializers: the type is also __shared__ storage.
struct Softmax {
  float max;
  float sum;
};

// -FLT_MAX rather than -inf keeps exp(m - z) free of inf - inf for threads with no columns.
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

// The row's statistics, the same in every thread of the block.
__device__ Softmax block_merge(Softmax s) {
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

// A thread's part of the row's first V columns: float4 groups tid, tid + blockDim, ... below V / 4, then one
// of the last V % 4 columns (kVec4); or single columns tid, tid + blockDim, ...
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

// The target's logit, NaN for a target outside [0, V) (as cross_entropy_forward_f32).
__device__ __forceinline__ float target_logit(const float* z, int target, int V) {
  return (target >= 0 && target < V) ? z[target] : __int_as_float(0x7fc00000);
}

template <bool kVec4>
__global__ void losses_kernel(float* losses, const float* logits, const int32_t* targets, int V, int Vp) {
  const int64_t row = blockIdx.x;
  const float* z = logits + row * Vp;
  const Softmax s = block_merge(fold_row<kVec4>(z, V));
  if (threadIdx.x == 0) losses[row] = logf(s.sum) - (target_logit(z, targets[row], V) - s.max);
}

// (exp(z - m) * inv) * dl, minus dl at the target: the probability rounded, then two more roundings, never
// fused into an FMA (cross_entropy_backward's arithmetic on cross_entropy_forward's probabilities).
__device__ __forceinline__ float dlogit(float z, float m, float inv, float dl, bool is_target) {
  const float scaled = __fmul_rn(__fmul_rn(expf(z - m), inv), dl);
  return is_target ? __fsub_rn(scaled, dl) : scaled;
}

template <bool kVec4>
__global__ void dlogits_kernel(float* losses, float* logits, const int32_t* targets, const float* dlosses,
                               int V, int Vp) {
  const int64_t row = blockIdx.x;
  float* z = logits + row * Vp;
  const int target = targets[row];
  // Read before block_merge's barriers, so before any thread overwrites the row.
  const float z_target = target_logit(z, target, V);
  const Softmax s = block_merge(fold_row<kVec4>(z, V));
  const float inv = 1.0f / s.sum, m = s.max, dl = dlosses[row];
  int begin = 0;
  if constexpr (kVec4) {
    const int groups = V / 4;
    for (int q = threadIdx.x; q < groups; q += blockDim.x) {
      const float4 v = reinterpret_cast<const float4*>(z)[q];
      const int j = 4 * q;
      reinterpret_cast<float4*>(z)[q] =
          make_float4(dlogit(v.x, m, inv, dl, j == target), dlogit(v.y, m, inv, dl, j + 1 == target),
                      dlogit(v.z, m, inv, dl, j + 2 == target), dlogit(v.w, m, inv, dl, j + 3 == target));
    }
    begin = 4 * groups;
  }
  for (int j = begin + threadIdx.x; j < V; j += blockDim.x) z[j] = dlogit(z[j], m, inv, dl, j == target);
  for (int j = V + threadIdx.x; j < Vp; j += blockDim.x) z[j] = 0.0f;
  if (threadIdx.x == 0) losses[row] = logf(s.sum) - (z_target - m);
}

bool rows_vectorizable(int Vp, const void* p) {
  return Vp % 4 == 0 && aligned16(p);
}

}  // namespace

void classifier_losses_f32(const Context& ctx, float* losses, const float* logits, const int32_t* targets,
                           int N, int V, int Vp) {
  if (N <= 0) return;
  if (rows_vectorizable(Vp, logits)) {
    losses_kernel<true><<<N, kThreads, 0, ctx.stream()>>>(losses, logits, targets, V, Vp);
  } else {
    losses_kernel<false><<<N, kThreads, 0, ctx.stream()>>>(losses, logits, targets, V, Vp);
  }
  GPT_CUDA_CHECK(cudaGetLastError());
}

void classifier_dlogits_f32(const Context& ctx, float* losses, float* logits, const int32_t* targets,
                            const float* dlosses, int N, int V, int Vp) {
  if (N <= 0) return;
  if (rows_vectorizable(Vp, logits)) {
    dlogits_kernel<true><<<N, kThreads, 0, ctx.stream()>>>(losses, logits, targets, dlosses, V, Vp);
  } else {
    dlogits_kernel<false><<<N, kThreads, 0, ctx.stream()>>>(losses, logits, targets, dlosses, V, Vp);
  }
  GPT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace gpt::cuda
