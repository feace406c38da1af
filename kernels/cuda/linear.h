// Fully connected layer on the GPU, the CUDA side of kernels/cpu/linear.h with the same layout and meaning:
// weights [OC, C] row-major (PyTorch/llm.c), out[N,OC] = inp[N,C] * weight[OC,C]^T + bias[OC].
// GEMMs are cuBLAS with fp32 accumulation whatever the storage type T (__half, __nv_bfloat16 or float; for
// float the math is true fp32, no TF32). All pointers are device memory; calls are asynchronous on
// ctx.stream(). Parameter gradients are fp32 because the engine accumulates gradients in fp32.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/cuda/runtime.h"

namespace gpt::cuda {

// out[N,OC] = inp[N,C] * weight[OC,C]^T + bias[OC]; bias may be null. Overwrites out. The bias is added
// inside the GEMM's fp32 epilogue, so each output is rounded to T once.
template <typename T>
void linear_forward(const Context& ctx, T* out, const T* inp, const T* weight, const T* bias, int N, int C,
                    int OC);

// Accumulates, as the CPU version does: dinp[N,C] += dout * weight (in T), dweight[OC,C] += dout^T * inp and
// dbias[OC] += column sums of dout (both fp32). dinp and dbias may be null (not needed / no bias).
// The bias gradient is a fixed-order reduction, so results repeat bit for bit from run to run.
template <typename T>
void linear_backward(const Context& ctx, T* dinp, float* dweight, float* dbias, const T* dout, const T* inp,
                     const T* weight, int N, int C, int OC);

}  // namespace gpt::cuda
