// Exact conversions between fp32 and the 16-bit float formats fp16 (IEEE binary16) and bf16 (bfloat16).
//
// Narrowing rounds to nearest, ties to even, handles subnormals, overflows to infinity and keeps infinities.
// NaN policy (the same for every conversion here, host and device): a NaN stays a NaN of the same sign, keeps
// the top bits of its payload that fit, and is always returned quiet (quiet bit set). This is bit-for-bit
// what x86's F16C instructions do for fp16, so the CPU instruction can serve as the test oracle.
// fp16 and bf16 values are held as their raw bits in uint16_t.
//
// The scalar functions are plain integer bit logic, inline and GPT_HOST_DEVICE, so the CUDA kernels and the
// CPU backend round identically; they are written without branches so loops over them vectorize. The bulk
// functions (half.cc) are what the CPU backend calls on whole weight arrays; for fp16 they use the F16C
// instructions where the CPU has them, which the exhaustive tests show to be bit-identical.
#pragma once

#include <cstdint>
#include <cstring>

#include "tensor/host_device.h"

namespace gpt {

GPT_HOST_DEVICE inline uint32_t bits_of(float value) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(value);
#else
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
#endif
}

GPT_HOST_DEVICE inline float float_of(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
#endif
}

// Number of leading zero bits of a nonzero 32-bit value.
GPT_HOST_DEVICE inline uint32_t leading_zeros(uint32_t nonzero) {
#if defined(__CUDA_ARCH__)
  return static_cast<uint32_t>(__clz(static_cast<int>(nonzero)));
#else
  return static_cast<uint32_t>(__builtin_clz(nonzero));
#endif
}

// fp32 -> fp16 bits, round to nearest even.
GPT_HOST_DEVICE inline uint16_t f32_to_f16(float value) {
  const uint32_t x = bits_of(value);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t a = x & 0x7fffffffu;  // |value|

  // Normal fp16 results: rebias the exponent (127 -> 15) and round away the low 13 mantissa bits. Adding
  // 0xfff plus the bit that will become the last kept one carries exactly when the discarded part is above
  // one half, or equal to one half with an odd kept part; a carry out of the mantissa correctly bumps the
  // exponent.
  const uint32_t rebiased = a - 0x38000000u;
  const uint32_t normal = (rebiased + 0x0fffu + ((rebiased >> 13) & 1u)) >> 13;

  // Subnormal fp16 results count units of 2^-24: the full 24-bit significand shifted right by
  // 126 - exponent, rounded the same way. The shift is clamped so that it stays defined for inputs that take
  // another branch; for every |value| <= 2^-25 it yields 0, and 2^-25 itself ties to the even 0.
  const int32_t exponent = static_cast<int32_t>(a >> 23);
  const int32_t unclamped = 126 - exponent;
  const uint32_t shift = static_cast<uint32_t>(unclamped < 14 ? 14 : (unclamped > 31 ? 31 : unclamped));
  const uint32_t significand = (a & 0x007fffffu) | 0x00800000u;
  const uint32_t subnormal =
      (significand + ((1u << (shift - 1)) - 1u) + ((significand >> shift) & 1u)) >> shift;

  // Quiet NaN: keep the top payload bits and set the fp16 quiet bit.
  const uint32_t nan = 0x7e00u | ((a >> 13) & 0x03ffu);

  uint32_t result = a > 0x7f800000u    ? nan
                    : a >= 0x477ff000u ? 0x7c00u  // >= 65520 rounds past the largest finite 65504: infinity
                    : a >= 0x38800000u ? normal   // >= 2^-14, the smallest normal fp16
                                       : subnormal;
  return static_cast<uint16_t>(result | sign);
}

// fp16 bits -> fp32, exact (every fp16 value is an fp32 value); NaNs come back quiet.
GPT_HOST_DEVICE inline float f16_to_f32(uint16_t half) {
  const uint32_t h = half;
  const uint32_t sign = (h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x03ffu;

  const uint32_t normal = ((exponent + 112u) << 23) | (mantissa << 13);  // rebias 15 -> 127
  const uint32_t special = 0x7f800000u | (mantissa << 13) | (mantissa ? 0x00400000u : 0u);
  // A subnormal is mantissa * 2^-24: normalize by the position of its top bit. Integer logic only, because
  // the compiler may not speculate floating-point operations, and a branch-free loop is what vectorizes.
  const uint32_t lz = leading_zeros(mantissa | 1u);  // 22..31; the top set bit is bit 31 - lz
  const uint32_t subnormal = mantissa ? ((134u - lz) << 23) | ((mantissa << (lz - 8)) & 0x007fffffu) : 0u;

  const uint32_t result = exponent == 0x1fu ? special : exponent == 0 ? subnormal : normal;
  return float_of(result | sign);
}

// fp32 -> bf16 bits, round to nearest even. bf16 is the top half of an fp32, so only the rounding is work;
// overflow to infinity and subnormals fall out of the same carry.
GPT_HOST_DEVICE inline uint16_t f32_to_bf16(float value) {
  const uint32_t x = bits_of(value);
  const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  const uint32_t nan = (x >> 16) | 0x0040u;
  return static_cast<uint16_t>((x & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

// bf16 bits -> fp32, exact; NaNs come back quiet.
GPT_HOST_DEVICE inline float bf16_to_f32(uint16_t bf) {
  const uint32_t x = static_cast<uint32_t>(bf) << 16;
  const bool is_nan = (x & 0x7fffffffu) > 0x7f800000u;
  return float_of(is_nan ? (x | 0x00400000u) : x);
}

// The value an fp32 takes after a trip through fp16 or bf16: how the CPU backend reproduces GPU compute
// weights before doing its arithmetic in fp32.
GPT_HOST_DEVICE inline float round_to_f16(float value) {
  return f16_to_f32(f32_to_f16(value));
}
GPT_HOST_DEVICE inline float round_to_bf16(float value) {
  return bf16_to_f32(f32_to_bf16(value));
}

// Bulk conversions over arrays of n elements (host only). The round_to_* forms may work in place
// (out == in); the others need non-overlapping arrays.
void f32_to_f16(const float* in, uint16_t* out, int64_t n);
void f16_to_f32(const uint16_t* in, float* out, int64_t n);
void f32_to_bf16(const float* in, uint16_t* out, int64_t n);
void bf16_to_f32(const uint16_t* in, float* out, int64_t n);
void round_to_f16(const float* in, float* out, int64_t n);
void round_to_bf16(const float* in, float* out, int64_t n);

}  // namespace gpt
