// Host entry points to device code that exercises tensor/half.h as compiled by nvcc: the same inline bit
// logic must give the same bits on the GPU as on the CPU, and agree with the GPU's conversion instructions.
#pragma once

#include <cstdint>

#include "kernels/cuda/runtime.h"

namespace gpt::cuda::testing {

struct HardwareComparison {
  uint64_t checked = 0;
  uint64_t mismatches = 0;
  uint32_t first_mismatch = 0;  // an input pattern that differed, when mismatches > 0
};

// Every one of the 2^32 fp32 patterns through gpt::f32_to_f16 (resp. f32_to_bf16) on the device, compared
// with __float2half_rn (resp. __float2bfloat16_rn): bits exactly for non-NaN inputs, NaN-ness for NaNs (the
// instructions return a canonical NaN, our policy keeps sign and payload).
HardwareComparison compare_f32_to_f16_with_hardware(const Context& ctx);
HardwareComparison compare_f32_to_bf16_with_hardware(const Context& ctx);

// The device's gpt::f32_to_f16 / f32_to_bf16 of n host values, and its f16_to_f32 / bf16_to_f32 of n host
// patterns, copied back for comparison with the host functions.
void f32_to_f16_on_device(const Context& ctx, const float* in, uint16_t* out, int64_t n);
void f32_to_bf16_on_device(const Context& ctx, const float* in, uint16_t* out, int64_t n);
void f16_to_f32_on_device(const Context& ctx, const uint16_t* in, float* out, int64_t n);
void bf16_to_f32_on_device(const Context& ctx, const uint16_t* in, float* out, int64_t n);

}  // namespace gpt::cuda::testing
