// The fused classifier's kernels (see classifier.h). One block per row: every thread folds its columns into
// a running (maximum, sum of exp(z - maximum)) pair, the pairs merge in a fixed tree (warp shuffles, then
// the warps in order), so a rerun gives the same bits; the gradient pass then writes each column from the
// value it read, p = exp(z - m) * (1 / sum), then p * dl (- dl at the target), cross_entropy.cu's roundings.
// The row statistics are row_softmax.cuh's, as cross_entropy.cu's.
#include <cfloat>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/classifier.h"
#include "kernels/cuda/dtype.cuh"
#include "kernels/cuda/row_softmax.cuh"

namespace gpt::cuda {
namespace {

constexpr int kThreads = 512;
using namespace row_softmax;

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
