// What attention's forward keeps for its backward, by backend (kernels/ops.h, Ops::attention_residual): its
// own small header so that the activation counts (train/activation_formulas.h, the planner, the memory guard)
// can name a backend's choice without depending on the seam or on a backend.
#pragma once

namespace gpt {

// The residual attention_forward writes and attention_backward reads, per sequence and head:
//   kProbabilities - the softmax probabilities before dropout, [B, NH, T, T] (the CPU backend's);
//   kLogSumExp     - one log-sum-exp of each row's scaled causal scores, [B, NH, T] (a flash-attention
//                    backend's: the backward recomputes the probabilities tile by tile from it, qkv and the
//                    forward's output; kernels/cpu/flash_attention.h; the CUDA backend's, whose flash
//                    kernels are kernels/cuda/flash_attention.h).
enum class AttentionResidual { kProbabilities, kLogSumExp };

// What CudaOps::attention_residual() declares, readable by a build without CUDA (the planner's and the
// memory guard's GPU target count the GPU's activations from it): the flash kernels keep the log-sum-exp, so
// the GPU's activation tables have no T x T term.
constexpr AttentionResidual cuda_attention_residual() {
  return AttentionResidual::kLogSumExp;
}

}  // namespace gpt
