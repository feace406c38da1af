// The reductions the engine reads back on the host, on the GPU (the CUDA side of CpuOps::sum, sum_of_squares
// and all_finite), and the division of a reduced gradient. fp32 inputs in device (or device-mapped) memory on
// ctx.stream(). The reductions wait for the stream and return their value; divide_f32 is asynchronous.
// Every reduction runs in a fixed order, so a rerun gives the same bits.
#pragma once

#include <cstdint>

#include "kernels/cuda/runtime.h"

namespace gpt::cuda {

// Sum of x[0..n) in double: chunks of kReduceChunk values, each summed by one block in a fixed tree, then the
// chunk sums added in chunk order. Within double rounding of the CPU's index-order sum.
double sum_f32(const Context& ctx, const float* x, int64_t n);

// Sum of x[i]^2 in double, in CpuOps::sum_of_squares' own order: chunks of kReduceChunk values, each summed
// in index order (one thread per chunk), then the chunk sums in chunk order. Bit for bit the CPU's result.
double sum_of_squares_f32(const Context& ctx, const float* x, int64_t n);

// Whether every x[i] is finite (no inf, no NaN).
bool all_finite_f32(const Context& ctx, const float* x, int64_t n);

// x[i] /= divisor, one correctly rounded fp32 division per value (bit for bit CpuOps::divide).
void divide_f32(const Context& ctx, float* x, float divisor, int64_t n);

// The chunk of CpuOps::sum_of_squares, shared by the sums here.
inline constexpr int64_t kReduceChunk = int64_t(1) << 14;

}  // namespace gpt::cuda
