// LayerNorm over the last dimension on the GPU, fp32, the CUDA side of kernels/cpu/layernorm.h: the same
// formulas, eps (kLayerNormEps = 1e-5) and saved statistics (mean[N], rstd[N] = 1/sqrt(biased var + eps)).
// Device pointers; asynchronous on ctx.stream().
#pragma once

#include "kernels/cuda/runtime.h"

namespace gpt::cuda {

// For each of N rows of C: out = (x - mean) * rstd * weight + bias. mean and rstd may be null (not saved).
// The row sums follow the CPU's order (its 16-lane lane_sum), so statistics agree to the last bit or two.
void layernorm_forward(const Context& ctx, float* out, float* mean, float* rstd, const float* x,
                       const float* weight, const float* bias, int N, int C);

// Accumulates into dx [N,C], dweight [C] and dbias [C], as kernels/cpu/layernorm.cc does. dweight and dbias
// are sums over the rows in a fixed order (chunks of rows, then the chunks in order): reruns repeat bit for
// bit (ops_layers_test). With N <= 32 the order is the CPU's, but not the bits: the chunks of larger N sum
// in another order, and nvcc contracts multiply-adds the CPU build may round separately, so CudaOps agrees
// with the reference within 1e-5 relative (op_cases_test).
void layernorm_backward(const Context& ctx, float* dx, float* dweight, float* dbias, const float* dout,
                        const float* x, const float* weight, const float* mean, const float* rstd, int N,
                        int C);

}  // namespace gpt::cuda
