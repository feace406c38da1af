// GELU on the GPU, the CUDA side of kernels/cpu/gelu.h: GPT-2's tanh approximation
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), computed in fp32 whatever the storage type T
// (__half, __nv_bfloat16 or float). Device pointers; asynchronous on ctx.stream().
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/runtime.h"

namespace gpt::cuda {

template <typename T>
void gelu_forward(const Context& ctx, T* out, const T* inp, int64_t n);

// Overwrites dinp = gelu'(inp) * dout (one rounding to T per element).
template <typename T>
void gelu_backward(const Context& ctx, T* dinp, const T* inp, const T* dout, int64_t n);

}  // namespace gpt::cuda
