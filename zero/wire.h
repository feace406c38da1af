// Conversions between the engine's fp32 buffers and the compute/wire dtype of a precision (fp32, fp16, bf16).
#pragma once

#include <cstddef>
#include <cstdint>

#include "tensor/tensor.h"
#include "zero/config.h"

namespace gpt {

DType wire_dtype(Precision precision);
size_t wire_bytes(Precision precision);  // bytes per element

// dst (wire dtype) = round(src * factor). Gradients are pre-divided by the world size here, as DeepSpeed
// does, so that every partial sum of a ring reduction is bounded by the largest local gradient: whether an
// fp16 sum overflows then depends only on the local gradients, never on the order ranks add in.
void to_wire(Precision precision, const float* src, void* dst, int64_t n, float factor = 1.0f);
// dst (fp32) = src (wire dtype), widened exactly.
void from_wire(Precision precision, const void* src, float* dst, int64_t n);

}  // namespace gpt
