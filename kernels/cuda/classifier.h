// The fused classifier's softmax kernels (Ops::classifier_forward / _backward,
// kernels/cuda/ops_classifier.cc): one chunk of logits [N, Vp] (the first V columns real, the padding
// probability 0 and gradient 0) turned into losses, or into losses and dlogits in place, in one kernel that
// never stores the probabilities. The arithmetic per element is cross_entropy.h's (the CPU's log-sum-exp form
// and its roundings), so the fused head matches cross_entropy_forward followed by cross_entropy_backward.
// fp32; targets int32; device pointers; asynchronous on ctx.stream().
#pragma once

#include <cstdint>

#include "kernels/cuda/runtime.h"

namespace gpt::cuda {

// losses [N] = log sum_k exp(z_k - m) - (z_target - m): one read of each row, nothing written to it.
void classifier_losses_f32(const Context& ctx, float* losses, const float* logits, const int32_t* targets,
                           int N, int V, int Vp);

// losses as above and, in place of the logits, dlogits = (softmax(z) - onehot(target)) * dlosses[n] in the
// first V columns, 0 in the padding: the row is read once for its statistics and once more as it is
// overwritten.
void classifier_dlogits_f32(const Context& ctx, float* losses, float* logits, const int32_t* targets,
                            const float* dlosses, int N, int V, int Vp);

}  // namespace gpt::cuda
