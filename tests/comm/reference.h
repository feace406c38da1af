// Independent references for the comm tests: deterministic per-rank inputs (so every rank can compute what
// every other rank holds), wire encodings through the tensor room's scalar conversions, and the ring
// reduction replayed on one rank in the documented order, plus the float64 sum it approximates.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tensor/tensor.h"

namespace gpt::comm::testing {

// Deterministic bytes that differ by rank, position and seed.
uint8_t pattern_byte(int rank, size_t index, int seed);
std::vector<uint8_t> pattern(int rank, size_t bytes, int seed);

// Element i of rank's input: a value exactly representable in dtype, spread over a few binades around 1 and
// signed (so rounding happens on every hop and cancellation too).
float input_value(int rank, size_t i, DType dtype, int seed);

// values (exactly representable in dtype) as wire bytes; one wire element back as a float.
std::vector<uint8_t> encode(const std::vector<float>& values, DType dtype);
float decode(const void* wire, size_t i, DType dtype);
float round_to(float value, DType dtype);

// Unit roundoff of a wire dtype: 2^-24 (f32), 2^-11 (f16), 2^-8 (bf16).
double unit_roundoff(DType dtype);

// Element i of chunk j's ring reduction (W ranks): contributions enter in the order j+1, j+2, ..., j+W-1
// (each partial rounded to dtype after an fp32 add), then rank j's in fp32, times scale. The inputs are
// input_value(rank, global_index, dtype, seed).
float ring_sum(int ranks, int chunk, size_t global_index, DType dtype, int seed, float scale);
// sum over ranks of the same inputs, in float64, and the sum of their magnitudes.
double exact_sum(int ranks, size_t global_index, DType dtype, int seed, double* magnitude);

// The error bound of a ring reduction against the float64 sum, for a result of magnitude at most
// scale * magnitude: W-2 roundings of a partial sum to dtype (relative u each, plus half the smallest
// fp16 subnormal where partials are tiny), W-1 fp32 additions and one fp32 multiplication.
double ring_error_bound(int ranks, DType dtype, double magnitude, double scale);

}  // namespace gpt::comm::testing
