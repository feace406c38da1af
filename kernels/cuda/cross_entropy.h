// Softmax + cross-entropy over a padded vocabulary on the GPU, the CUDA side of kernels/cpu/cross_entropy.h
// with the same layout and meaning: logits [N, Vp] of which the first V columns are real; the padding gets
// probability 0 and gradient 0. fp32; targets int32; device pointers; asynchronous on ctx.stream(). One block
// per row, fp32 statistics reduced in a fixed order (a rerun gives the same bits).
#pragma once

#include <cstdint>

#include "kernels/cuda/runtime.h"

namespace gpt::cuda {

// probs [N, Vp] = softmax over the first V columns (0 in columns V..Vp-1) and losses [N] = log sum_k
// exp(z_k - m) - (z_target - m), m the row's maximum (the CPU's log-sum-exp form). probs may alias logits.
// A target outside [0, V) gives a NaN loss (the CPU requires targets in range).
void cross_entropy_forward_f32(const Context& ctx, float* losses, float* probs, const float* logits,
                               const int32_t* targets, int N, int V, int Vp);

// dlogits [N, Vp] = (probs - onehot(target)) * dlosses[n] in the first V columns, 0 in the padding; the
// target's entry is rounded twice (p * dl, then - dl), as the CPU does. dlogits may alias probs.
void cross_entropy_backward_f32(const Context& ctx, float* dlogits, const float* probs,
                                const int32_t* targets, const float* dlosses, int N, int V, int Vp);

// The vocabulary-parallel forms (Ops::cross_entropy_stats, _merge, _backward_columns): a slice [N, W] of the
// logits whose column j is vocabulary entry first + j, real below V; stats are [N, 3] per slice and [G, N, 3]
// gathered. probs may alias logits, dlogits probs.
void cross_entropy_stats_f32(const Context& ctx, float* stats, const float* logits, const int32_t* targets,
                             int N, int W, int64_t first, int V);
void cross_entropy_merge_f32(const Context& ctx, float* losses, float* probs, const float* logits,
                             const float* stats, int G, int N, int W, int64_t first, int V);
void cross_entropy_backward_columns_f32(const Context& ctx, float* dlogits, const float* probs,
                                        const int32_t* targets, const float* dlosses, int N, int W,
                                        int64_t first, int V);

}  // namespace gpt::cuda
