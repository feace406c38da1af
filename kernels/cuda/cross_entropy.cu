// Softmax cross-entropy kernels (see cross_entropy.h). Forward, per row: every thread folds its columns into
// a running (maximum, sum of exp(z - maximum)) pair, the pairs are merged in a fixed tree (warp shuffles,
// then the warps in order), and a second pass writes p = exp(z - m) * (1 / sum), the CPU's arithmetic per
// element. Rows whose layout allows (Vp % 4 == 0, 16-byte aligned) are read and written as float4.
#include <cfloat>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/cross_entropy.h"
#include "kernels/cuda/dtype.cuh"
#include "kernels/cuda/row_softmax.cuh"

namespace gpt::cuda {
namespace {

constexpr int kForwardThreads = 512;
constexpr int kBackwardThreads = 256;
using namespace row_softmax;

template <bool kVec4>
__global__ void forward_kernel(float* losses, float* probs, const float* logits, const int32_t* targets,
                               int V, int Vp) {
  const int64_t row = blockIdx.x;
  const float* z = logits + row * Vp;
  float* p = probs + row * Vp;  // may be z: each column is read before it is written, by the same thread
  const int target = targets[row];
  // Read before block_merge's barriers, so before any thread overwrites the row in place.
  const float z_target = (target >= 0 && target < V) ? z[target] : __int_as_float(0x7fc00000);
  const Softmax s = block_merge(fold_row<kVec4>(z, V));
  const float inv = 1.0f / s.sum;
  if constexpr (kVec4) {
    const int groups = V / 4;
    for (int q = threadIdx.x; q < groups; q += blockDim.x) {
      const float4 v = reinterpret_cast<const float4*>(z)[q];
      reinterpret_cast<float4*>(p)[q] = make_float4(expf(v.x - s.max) * inv, expf(v.y - s.max) * inv,
                                                    expf(v.z - s.max) * inv, expf(v.w - s.max) * inv);
    }
    const int j = 4 * groups + threadIdx.x;
    if (j < V) p[j] = expf(z[j] - s.max) * inv;
  } else {
    for (int j = threadIdx.x; j < V; j += blockDim.x) p[j] = expf(z[j] - s.max) * inv;
  }
  for (int j = V + threadIdx.x; j < Vp; j += blockDim.x) p[j] = 0.0f;
  if (threadIdx.x == 0) losses[row] = logf(s.sum) - (z_target - s.max);
}

// p * dl, minus dl at the target: two roundings, never fused into one FMA (the CPU rounds p * dl first).
__device__ __forceinline__ float grad(float p, float dl, bool is_target) {
  const float scaled = __fmul_rn(p, dl);
  return is_target ? __fsub_rn(scaled, dl) : scaled;
}

// Columns [0, V) of the Vp are real; column j is vocabulary entry first + j (first = 0 but for the
// vocabulary-parallel slices), so the one-hot term lands only on the slice that holds the target.
template <bool kVec4>
__global__ void backward_kernel(float* dlogits, const float* probs, const int32_t* targets,
                                const float* dlosses, int V, int Vp, int64_t first) {
  const int64_t row = blockIdx.x;
  const float* p = probs + row * Vp;
  float* dz = dlogits + row * Vp;  // may be p: elementwise, each column read before written by one thread
  const int64_t target = int64_t(targets[row]) - first;
  const float dl = dlosses[row];
  int begin = 0;
  if constexpr (kVec4) {
    const int groups = V / 4;
    for (int q = threadIdx.x; q < groups; q += blockDim.x) {
      const float4 v = reinterpret_cast<const float4*>(p)[q];
      const int j = 4 * q;
      reinterpret_cast<float4*>(dz)[q] =
          make_float4(grad(v.x, dl, j == target), grad(v.y, dl, j + 1 == target),
                      grad(v.z, dl, j + 2 == target), grad(v.w, dl, j + 3 == target));
    }
    begin = 4 * groups;
  }
  for (int j = begin + threadIdx.x; j < V; j += blockDim.x) dz[j] = grad(p[j], dl, j == target);
  for (int j = V + threadIdx.x; j < Vp; j += blockDim.x) dz[j] = 0.0f;
}

// One slice's statistics (Ops::cross_entropy_stats): the block's (max, sum) over the V real columns of the
// W, and the target's logit if the slice holds it.
template <bool kVec4>
__global__ void stats_kernel(float* stats, const float* logits, const int32_t* targets, int V, int W,
                             int64_t first) {
  const int64_t row = blockIdx.x;
  const float* z = logits + row * W;
  const Softmax s = block_merge(fold_row<kVec4>(z, V));
  if (threadIdx.x == 0) {
    const int64_t target = int64_t(targets[row]) - first;
    float* st = stats + row * 3;
    st[0] = V > 0 ? s.max : -INFINITY;
    st[1] = V > 0 ? s.sum : 0.0f;
    st[2] = target >= 0 && target < V ? z[target] : 0.0f;
  }
}

// The slices' statistics merged (Ops::cross_entropy_merge), then this slice's probabilities. Every thread
// merges the G pairs itself, in rank order (a few loads), so all hold the same bits.
__global__ void merge_kernel(float* losses, float* probs, const float* logits, const float* stats, int G,
                             int N, int V, int W) {
  const int64_t row = blockIdx.x;
  float m = -INFINITY, sum = 0.0f, z_target = 0.0f;
  for (int g = 0; g < G; ++g) {
    const float* st = stats + (int64_t(g) * N + row) * 3;
    if (st[1] != 0.0f) m = fmaxf(m, st[0]);
  }
  for (int g = 0; g < G; ++g) {
    const float* st = stats + (int64_t(g) * N + row) * 3;
    if (st[1] != 0.0f) sum += st[1] * expf(st[0] - m);
    z_target += st[2];
  }
  const float inv = 1.0f / sum;
  const float* z = logits + row * W;
  float* p = probs + row * W;  // may be z: each column is read, then written, by one thread
  for (int j = threadIdx.x; j < V; j += blockDim.x) p[j] = expf(z[j] - m) * inv;
  for (int j = V + threadIdx.x; j < W; j += blockDim.x) p[j] = 0.0f;
  if (threadIdx.x == 0) losses[row] = logf(sum) - (z_target - m);
}

bool rows_vectorizable(int Vp, const void* a, const void* b) {
  return Vp % 4 == 0 && aligned16(a) && aligned16(b);
}

// The real columns of a slice [first, first + W) of a vocabulary of V.
int real_columns(int64_t first, int W, int V) {
  const int64_t real = int64_t(V) - first;
  return real < 0 ? 0 : (real < W ? int(real) : W);
}

}  // namespace

void cross_entropy_forward_f32(const Context& ctx, float* losses, float* probs, const float* logits,
                               const int32_t* targets, int N, int V, int Vp) {
  if (N <= 0) return;
  if (rows_vectorizable(Vp, probs, logits)) {
    forward_kernel<true><<<N, kForwardThreads, 0, ctx.stream()>>>(losses, probs, logits, targets, V, Vp);
  } else {
    forward_kernel<false><<<N, kForwardThreads, 0, ctx.stream()>>>(losses, probs, logits, targets, V, Vp);
  }
  GPT_CUDA_CHECK(cudaGetLastError());
}

void cross_entropy_backward_f32(const Context& ctx, float* dlogits, const float* probs,
                                const int32_t* targets, const float* dlosses, int N, int V, int Vp) {
  if (N <= 0) return;
  if (rows_vectorizable(Vp, dlogits, probs)) {
    backward_kernel<true>
        <<<N, kBackwardThreads, 0, ctx.stream()>>>(dlogits, probs, targets, dlosses, V, Vp, int64_t(0));
  } else {
    backward_kernel<false>
        <<<N, kBackwardThreads, 0, ctx.stream()>>>(dlogits, probs, targets, dlosses, V, Vp, int64_t(0));
  }
  GPT_CUDA_CHECK(cudaGetLastError());
}

void cross_entropy_stats_f32(const Context& ctx, float* stats, const float* logits, const int32_t* targets,
                             int N, int W, int64_t first, int V) {
  if (N <= 0) return;
  const int real = real_columns(first, W, V);
  if (rows_vectorizable(W, logits, logits)) {
    stats_kernel<true><<<N, kForwardThreads, 0, ctx.stream()>>>(stats, logits, targets, real, W, first);
  } else {
    stats_kernel<false><<<N, kForwardThreads, 0, ctx.stream()>>>(stats, logits, targets, real, W, first);
  }
  GPT_CUDA_CHECK(cudaGetLastError());
}

void cross_entropy_merge_f32(const Context& ctx, float* losses, float* probs, const float* logits,
                             const float* stats, int G, int N, int W, int64_t first, int V) {
  if (N <= 0) return;
  merge_kernel<<<N, kForwardThreads, 0, ctx.stream()>>>(losses, probs, logits, stats, G, N,
                                                        real_columns(first, W, V), W);
  GPT_CUDA_CHECK(cudaGetLastError());
}

void cross_entropy_backward_columns_f32(const Context& ctx, float* dlogits, const float* probs,
                                        const int32_t* targets, const float* dlosses, int N, int W,
                                        int64_t first, int V) {
  if (N <= 0) return;
  const int real = real_columns(first, W, V);
  if (rows_vectorizable(W, dlogits, probs)) {
    backward_kernel<true>
        <<<N, kBackwardThreads, 0, ctx.stream()>>>(dlogits, probs, targets, dlosses, real, W, first);
  } else {
    backward_kernel<false>
        <<<N, kBackwardThreads, 0, ctx.stream()>>>(dlogits, probs, targets, dlosses, real, W, first);
  }
  GPT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace gpt::cuda
