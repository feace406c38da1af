// Bulk block quantizers on the CPU: one slice, or many equal slices laid out back to back, to and from the
// wire format the ZeRO++ engine sends as raw bytes (qwZ int8 weight gathers, qgZ int4 gradient all-to-alls).
// The per-block math and its exactness argument are in quantize_block.h.
//
// Wire format of one quantized slice of n values, blocks of B (B a positive multiple of 8):
//   [data: n bytes (int8) or ceil(n/2) bytes (int4, element 2k low nibble, 2k+1 high)]
//   [scales: ceil(n/B) fp32, native byte order]
// in one contiguous buffer of quantized_bytes(n, bits, B) bytes, with no padding: the scales start right
// after the data and need not be 4-byte aligned. Blocks start at the slice's start and never span two slices;
// the last block of a slice is short when B does not divide n. W consecutive slices of slice_len values
// quantize to W such buffers back to back: slice i starts at byte i * quantized_bytes(slice_len, bits, B).
//
// Every function parallelizes over blocks with OpenMP (gpt::cpu::set_num_threads sets the count); each block
// is computed by one thread with the same instructions whatever the count, so results never depend on it.
// Invalid arguments (bits not 4 or 8, a block that is not a positive multiple of 8, negative lengths) throw
// std::invalid_argument.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tensor/tensor.h"

namespace gpt::quant {

// A block size is valid when it is a positive multiple of 8 (so int4 blocks start on a byte boundary) and at
// most 2^30.
bool valid_block_size(int64_t block);

// Number of blocks (= fp32 scales) of a slice: ceil(n / block).
int64_t block_count(int64_t n, int block);
// Bytes of the packed codes of a slice: n for int8, ceil(n / 2) for int4.
size_t data_bytes(int64_t n, int bits);
// Wire size of one quantized slice: data_bytes(n, bits) + 4 * block_count(n, block).
size_t quantized_bytes(int64_t n, int bits, int block);

// Quantizes x[0, n) into out (quantized_bytes(n, bits, block) bytes). Returns false when some block held an
// inf or NaN (its scale is then NaN and its codes 0); the engine can OR this into its overflow flag.
bool quantize_slice(const float* x, int64_t n, int bits, int block, uint8_t* out);
// The same for input stored as `dtype` (kF32, kF16 or kBF16 bits), widened exactly to fp32 first.
bool quantize_slice(const void* x, DType dtype, int64_t n, int bits, int block, uint8_t* out);

// out[i] = x'_i. With round_to = kF16 or kBF16, x'_i is rounded to that dtype (nearest even) and widened
// back: the weights a compute dtype of that precision holds after dequantization.
void dequantize_slice(const uint8_t* in, int64_t n, int bits, int block, float* out,
                      DType round_to = DType::kF32);
// acc[i] += x'_i, one fp32 addition per value (never fused): the gradient path's fp32 sums.
void dequantize_add(const uint8_t* in, int64_t n, int bits, int block, float* acc);

// Many slices: x holds `count` slices of slice_len values back to back; each becomes its own quantized slice
// (blocks restart at every slice), written back to back into out (count * quantized_bytes(slice_len, ...)).
bool quantize_slices(const float* x, int64_t slice_len, int64_t count, int bits, int block, uint8_t* out);
bool quantize_slices(const void* x, DType dtype, int64_t slice_len, int64_t count, int bits, int block,
                     uint8_t* out);
// LoCo error feedback (qgZ; the recurrence is in zero/qgz.h and, per element, in quantize_block.h): quantizes
// the `count` slices of x plus the error kept in `error`, and replaces that error with the new one. `error`
// holds count int8 slices in the wire format above (count * quantized_bytes(slice_len, 8, block) bytes, the
// same blocks as out's); all-zero bytes mean no error kept. beta weighs the kept error against the new one.
// A non-finite block is quantized as quantize_slices does (NaN scale) and its kept error is cleared.
bool quantize_slices_with_feedback(const float* x, int64_t slice_len, int64_t count, int bits, int block,
                                   float beta, uint8_t* error, uint8_t* out);
// The inverses: slice i of `in` to out[i * slice_len, (i + 1) * slice_len), or added into acc there.
void dequantize_slices(const uint8_t* in, int64_t slice_len, int64_t count, int bits, int block, float* out,
                       DType round_to = DType::kF32);
void dequantize_add_slices(const uint8_t* in, int64_t slice_len, int64_t count, int bits, int block,
                           float* acc);

}  // namespace gpt::quant
