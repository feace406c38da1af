// Causal attention without dropout as batched GEMMs on cuBLAS and two softmax kernels (attention_gemm.cu says
// how): what attention.h's attention_forward and attention_backward compute when no dropout mask is drawn,
// with the same layout (qkv [B,T,3C], att [B,NH,T,T] before dropout, out [B,T,C]) and any head size.
// attention.cu calls these; callers use attention.h.
#pragma once

#include "kernels/cuda/runtime.h"

namespace gpt::cuda {

// Overwrites out and att.
void attention_forward_gemm(const Context& ctx, float* out, float* att, const float* qkv, int B, int T, int C,
                            int NH);

// Accumulates into dqkv. Needs up to 64 MiB of temporary device memory (dS for a group of heads), taken and
// given back in stream order.
void attention_backward_gemm(const Context& ctx, float* dqkv, const float* dout, const float* qkv,
                             const float* att, int B, int T, int C, int NH);

}  // namespace gpt::cuda
