// AdamW on the GPU, the CUDA side of kernels/cpu/adamw.h: the same element update
// (kernels/common/adamw_element.h) with the same per-call constants (gpt::adamw::constants, computed on the
// host in double and rounded to fp32), so each element gets the CPU's operations in the CPU's order. That
// is not a promise of the CPU's bits: nvcc contracts multiply-adds into FMAs by default, and gcc does too
// where it chooses, so the two may round differently. The tests hold CudaOps to 1e-5 relative of CpuOps; the
// first H100 run measured 0 differences (bench/results/gpu_check.md, "adamw step 7"). fp32 state; device
// pointers; asynchronous on ctx.stream(). A range of a larger tensor is a pointer offset and a count.
#pragma once

#include <cstdint>

#include "kernels/common/adamw_element.h"
#include "kernels/cuda/runtime.h"
#include "tensor/tensor.h"

namespace gpt::cuda {

// One update of param, m and v (n elements each) from grad * c.grad_scale. decoupled: AdamW; otherwise Adam
// with L2 regularization (AdamWHyper::decoupled).
void adamw_f32(const Context& ctx, float* param, const float* grad, float* m, float* v, int64_t n,
               const gpt::adamw::Constants<float>& c, bool decoupled);

// The same update fused with the compute copy: also writes compute[i] = the updated param[i] rounded to
// compute_dtype (kF16 or kBF16 bits, round to nearest even exactly as tensor/half.h and CudaOps::cast), so
// the optimizer step and the fp32 -> fp16/bf16 copy read the parameter once. compute is the range's own
// slice of the compute weights (n values).
void adamw_f32_with_copy(const Context& ctx, float* param, const float* grad, float* m, float* v, int64_t n,
                         const gpt::adamw::Constants<float>& c, bool decoupled, uint16_t* compute,
                         DType compute_dtype);

}  // namespace gpt::cuda
