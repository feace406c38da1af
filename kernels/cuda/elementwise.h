// Element-wise kernels of the CUDA backend (kernels/cuda/cuda_ops.h): fill, add, add-into and the casts
// between fp32 and fp16/bf16 (with the exact rounding of tensor/half.h, so device and host round alike).
// Device (or device-mapped) pointers; asynchronous on ctx.stream().
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/runtime.h"

namespace gpt::cuda {

void fill_f32(const Context& ctx, float* out, float value, int64_t n);
// out = a + b rounded to T (__half, __nv_bfloat16 or float); out may alias a or b.
template <typename T>
void add(const Context& ctx, T* out, const T* a, const T* b, int64_t n);
void add_into_f32(const Context& ctx, float* dst, const float* src, int64_t n);
// dst (fp16 bits or bf16 bits) = round(src * scale), round to nearest even.
void f32_to_f16_scaled(const Context& ctx, uint16_t* dst, const float* src, float scale, int64_t n);
void f32_to_bf16_scaled(const Context& ctx, uint16_t* dst, const float* src, float scale, int64_t n);
void f32_scaled(const Context& ctx, float* dst, const float* src, float scale, int64_t n);
void f16_to_f32(const Context& ctx, float* dst, const uint16_t* src, int64_t n);
void bf16_to_f32(const Context& ctx, float* dst, const uint16_t* src, int64_t n);

}  // namespace gpt::cuda
