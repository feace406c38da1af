// ZeRO++'s block quantizers on the GPU, the CUDA side of kernels/quant/quantize.h: qwZ's int8 weights,
// qgZ's int4/int8 gradients with LoCo's error feedback, and their inverses. Same wire format (codes, then the
// unaligned fp32 scales, slice after slice) and the same per-block math (kernels/quant/quantize_block.h), so
// the bytes are the CPU's bytes.
//
// Pointers may be device memory or wire memory (pinned host memory mapped for the device). Everything is
// enqueued on ctx.stream() and nothing waits: the callers that quantize get a device flag set to nonzero when
// some block held an inf or NaN, and read it back themselves. Arguments are taken as valid (CudaOps checks
// them as the CPU functions do).
#pragma once

#include <cstdint>

#include "kernels/cuda/runtime.h"
#include "tensor/tensor.h"

namespace gpt::cuda {

// `count` slices of slice_len values of x (stored as dtype: kF32, kF16 or kBF16) into out
// (count * quant::quantized_bytes(slice_len, bits, block) bytes). *nonfinite (device memory) becomes 1 when a
// block was not finite; it is never cleared here.
void quantize_blocks(const Context& ctx, const void* x, DType dtype, int64_t slice_len, int64_t count,
                     int bits, int block, uint8_t* out, uint32_t* nonfinite);

// The same for fp32 x plus the error kept in `error` (count int8 slices of the same blocks), which is
// replaced by the new kept error; one_minus_beta is 1 - beta rounded to fp32 by the caller.
void quantize_blocks_with_feedback(const Context& ctx, const float* x, int64_t slice_len, int64_t count,
                                   int bits, int block, float beta, float one_minus_beta, uint8_t* error,
                                   uint8_t* out, uint32_t* nonfinite);

// The inverse into out (count * slice_len fp32 values), each value rounded through round_to (kF32, kF16 or
// kBF16) as the CPU does.
void dequantize_blocks(const Context& ctx, const uint8_t* in, int64_t slice_len, int64_t count, int bits,
                       int block, float* out, DType round_to);

// The inverse added into acc, one unfused fp32 addition per value.
void dequantize_add_blocks(const Context& ctx, const uint8_t* in, int64_t slice_len, int64_t count, int bits,
                           int block, float* acc);

}  // namespace gpt::cuda
