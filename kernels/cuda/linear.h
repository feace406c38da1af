// Fully connected layer on the GPU, the CUDA side of kernels/cpu/linear.h with the same layout and meaning:
// weights [OC, C] row-major (PyTorch/llm.c), out[N,OC] = inp[N,C] * weight[OC,C]^T + bias[OC].
// GEMMs are cuBLASLt with fp32 accumulation (CUBLAS_COMPUTE_32F) whatever the storage type T (__half,
// __nv_bfloat16 or float; for float the math is true fp32, never TF32). All pointers are device memory;
// calls are asynchronous on ctx.stream(). Parameter gradients are fp32 because the engine accumulates
// gradients in fp32.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/cuda/runtime.h"

namespace gpt::cuda {

// out[N,OC] = inp[N,C] * weight[OC,C]^T + bias[OC]; bias may be null. Overwrites out. The bias is added in
// the GEMM's fp32 epilogue (CUBLASLT_EPILOGUE_BIAS), so each output is rounded to T once.
template <typename T>
void linear_forward(const Context& ctx, T* out, const T* inp, const T* weight, const T* bias, int N, int C,
                    int OC);

// out[N,OC] = GELU(inp * weight^T + bias) in one GEMM (CUBLASLT_EPILOGUE_GELU_BIAS), and pre_gelu[N,OC] =
// inp * weight^T + bias, the input that gelu_backward needs (CUBLASLT_EPILOGUE_GELU_AUX_BIAS). bias and
// pre_gelu may be null (no bias / inference). GELU here is cuBLASLt's tanh approximation, which matches
// kernels/cuda/gelu.h to fp32 rounding, not bit for bit. Where cuBLASLt cannot fuse (no algorithm for the
// shape and alignment; the pre-activation needs OC % 8 == 0) it runs linear_forward then gelu_forward.
// The seam (kernels/ops.h) keeps linear and GELU separate, so CudaOps does not call this yet.
template <typename T>
void linear_gelu_forward(const Context& ctx, T* out, T* pre_gelu, const T* inp, const T* weight,
                         const T* bias, int N, int C, int OC);

// Overwrites dinp[N,C] = dout * weight (in T; no zeroing pass, the GEMM's beta is 0) and accumulates
// dweight[OC,C] += dout^T * inp and dbias[OC] += column sums of dout (both fp32), as Ops::linear_backward.
// dinp and dbias may be null (not needed / no bias).
// The bias gradient is a fixed-order reduction, so results repeat bit for bit from run to run.
template <typename T>
void linear_backward(const Context& ctx, T* dinp, float* dweight, float* dbias, const T* dout, const T* inp,
                     const T* weight, int N, int C, int OC);

// Memory-centric tiling, as kernels/cpu/linear.h: the tile of output features [first, first + W) of OC, from
// its weight rows weight[W,C] and bias[W] (may be null); out and dout are the whole layer's [N,OC], read and
// written only in the tile's columns (the GEMMs' leading dimension is OC). Same math as linear_forward and
// linear_backward on those columns, but not bit for bit: cuBLASLt picks its algorithm (and with it the order
// of the sums) by the GEMM's shape, which the tile changes.
template <typename T>
void linear_forward_columns(const Context& ctx, T* out, const T* inp, const T* weight, const T* bias, int N,
                            int C, int OC, int first, int W);

// Accumulates dweight[W,C] += dout[:, first:first+W]^T * inp and dbias[W] += its column sums (fp32), and
// dinp[N,C] += dout[:, first:first+W] * weight, the tile's part of the input gradient. dinp and dbias may be
// null.
template <typename T>
void linear_backward_columns(const Context& ctx, T* dinp, float* dweight, float* dbias, const T* dout,
                             const T* inp, const T* weight, int N, int C, int OC, int first, int W);

}  // namespace gpt::cuda
