// LayerNorm over the last dimension on the GPU in fp32, fp16 or bf16 storage (the statistics fp32; the
// forward also fused with the residual add before it), the CUDA side of kernels/cpu/layernorm.h: the same
// formulas, eps (kLayerNormEps = 1e-5) and saved statistics (mean[N], rstd[N] = 1/sqrt(biased var + eps)).
// Device pointers; asynchronous on ctx.stream().
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/cuda/runtime.h"

namespace gpt::cuda {

// For each of N rows of C: out = (x - mean) * rstd * weight + bias. mean and rstd may be null (not saved).
// The row sums follow the CPU's order (its 16-lane lane_sum), so statistics agree to the last bit or two.
void layernorm_forward(const Context& ctx, float* out, float* mean, float* rstd, const float* x,
                       const float* weight, const float* bias, int N, int C);

// layernorm_forward on fp16 or bf16 rows (T = __half or __nv_bfloat16): the same statistics in fp32 from the
// widened values, out rounded to T once, no fp32 copies of the tensors.
template <typename T>
void layernorm_forward_half(const Context& ctx, T* out, float* mean, float* rstd, const T* x, const T* weight,
                            const T* bias, int N, int C);

// The residual stream's add and the LayerNorm that reads it, in one pass over each row (kernels/ops.h,
// residual_layernorm_forward) in the storage type T (__half, __nv_bfloat16 or float): residual = a + b
// rounded to T, and out = (residual - mean) * rstd * weight + bias rounded to T, the statistics (fp32, never
// null) those of the rounded sums, summed in layernorm_forward's lane order. Each thread reads back only the
// sums it wrote, so residual may alias a or b.
template <typename T>
void residual_layernorm_forward(const Context& ctx, T* residual, T* out, float* mean, float* rstd, const T* a,
                                const T* b, const T* weight, const T* bias, int N, int C);

// Accumulates into dx [N,C], dweight [C] and dbias [C], as kernels/cpu/layernorm.cc does. dweight and dbias
// are sums over the rows in a fixed order (chunks of rows, then the chunks in order): reruns repeat bit for
// bit (ops_layers_test). With N <= 32 the order is the CPU's, but not the bits: the chunks of larger N sum
// in another order, and nvcc contracts multiply-adds the CPU build may round separately, so CudaOps agrees
// with the reference within 1e-5 relative (op_cases_test). dx, dout, x and weight in the storage type T
// (__half, __nv_bfloat16 or float; dx rounded back once), the statistics and dweight, dbias fp32.
template <typename T>
void layernorm_backward(const Context& ctx, T* dx, float* dweight, float* dbias, const T* dout, const T* x,
                        const T* weight, const float* mean, const float* rstd, int N, int C);

}  // namespace gpt::cuda
