// Per-block math of the symmetric block quantizers (qwZ: int8 weights; qgZ: int4 gradients), written once as
// GPT_HOST_DEVICE inline functions of plain floats and integers, so that the CPU kernels (quantize.cc) and
// the CUDA kernels to come produce the same bytes for the same input.
//
// The scheme (ours; DeepSpeed's differs, see docs/zeropp-reference.md section 8). A slice is cut into blocks
// of B values from its start (the last block may be short). For a block with absmax a = max |x_i| and qmax =
// 2^(bits-1) - 1 (127 for int8, 7 for int4):
//   s    = a / qmax                              fp32 division, round to nearest even; s = 1 when a == 0
//   q_i  = clamp(nearbyint(x_i / s), -qmax, qmax)  fp32 division, then round half to even
//   x'_i = q_i * s                               fp32 multiplication
// As s is a / qmax up to one rounding, x_i / s exceeds qmax by at most a few parts in 2^23 and rounds back
// to qmax: nothing clips, and |x_i - x'_i| <= s/2 + ulp(a). A block holding inf or NaN gets s = NaN and every
// q_i = 0, so its x' are NaN and an overflow can never be quantized away.
//
// Two edge rules keep those promises where plain rounding of a / qmax would break them:
//  * Subnormal scales (a < qmax * 2^-126). A subnormal s has few significant bits, so the nearest one can be
//    far below a / qmax (int8, a = 190 * 2^-149: s = 2^-149, and 190 would clip to 127). There s is rounded
//    up instead, s = ceil(a / (qmax * 2^-149)) * 2^-149, computed exactly in integers; then a / s <= qmax.
//  * a = FLT_MAX with int8: 127 * RN(a / 127) overflows to inf. Whenever qmax * s overflows, s is lowered
//    by one ulp (a / s then exceeds qmax by one part in 2^23 and still rounds to qmax): finite in, finite
//    out.
//
// Why host and device agree bit for bit. IEEE 754 division and multiplication are correctly rounded, rounding
// an fp32 value to an integer is exact, and the clamp and the integer conversion are exact; so every result
// is a function of the input bits alone, provided that
//  1. x / s is a true division, never a multiplication by 1/s: no -ffast-math or -freciprocal-math on the
//     host; the device path calls __fdiv_rn, __fmul_rn and __fadd_rn, which stay IEEE under any nvcc flags;
//  2. subnormals are honoured: no FTZ/DAZ, i.e. the host's default MXCSR and nvcc's default -ftz=false
//     (--use_fast_math turns FTZ on: the PTX then reads div.rn.ftz.f32, and subnormal blocks would differ);
//  3. rounding is round-half-even: the host's default rounding mode, which nothing in this program changes
//     (std::nearbyint follows it, and unlike roundeven it vectorizes); on the device rintf is always RNE;
//  4. a product is never fused with a following addition. GCC contracts a * b + c into an FMA even with
//     -std=c++20 under -march=native (the quantizer tests caught exactly this). dequantize_accumulate keeps
//     its product out of the compiler's sight with an empty asm on the host, whatever the caller's flags;
//     loops that add dequantized values in bulk are compiled with -ffp-contract=off instead, as
//     //kernels/quant is, so they still vectorize. The device path uses __fmul_rn and __fadd_rn, which are
//     never contracted. A division and a rounding have nothing to be contracted with.
#pragma once

#include <cmath>
#include <cstdint>

#include "tensor/half.h"
#include "tensor/host_device.h"

namespace gpt::quant {

// Bit patterns: every |x| at or above kNonFiniteBits is inf or NaN; kScaleNaNBits is the one NaN that marks a
// non-finite block's scale (a fixed pattern, so the wire bytes are deterministic too).
inline constexpr uint32_t kNonFiniteBits = 0x7f800000u;
inline constexpr uint32_t kScaleNaNBits = 0x7fc00000u;
inline constexpr uint32_t kMinNormalBits = 0x00800000u;  // 2^-126

// Largest |q| of a bits-wide code: 127 for int8, 7 for int4 (-8 is never produced).
GPT_HOST_DEVICE constexpr int qmax_of(int bits) {
  return (1 << (bits - 1)) - 1;
}

// |x| as bits. Non-negative floats order like their bit patterns and inf/NaN sit above every finite value, so
// the integer max of magnitude_bits over a block is both its absmax and its "holds a non-finite" flag, and
// the loop that computes it vectorizes as plain integer max.
GPT_HOST_DEVICE inline uint32_t magnitude_bits(float x) {
  return bits_of(x) & 0x7fffffffu;
}

GPT_HOST_DEVICE inline bool block_is_finite(uint32_t absmax_bits) {
  return absmax_bits < kNonFiniteBits;
}

// The scale of a block from its absmax (as magnitude_bits) and qmax; see the rules above.
GPT_HOST_DEVICE inline float block_scale(uint32_t absmax_bits, int qmax) {
  if (absmax_bits >= kNonFiniteBits) return float_of(kScaleNaNBits);
  if (absmax_bits == 0) return 1.0f;
  const float qmax_f = static_cast<float>(qmax);
#if defined(__CUDA_ARCH__)
  float scale = __fdiv_rn(float_of(absmax_bits), qmax_f);
#else
  float scale = float_of(absmax_bits) / qmax_f;
#endif
  if (bits_of(scale) < kMinNormalBits) {
    // a < qmax * 2^-126 < 2^-119, so its biased exponent is at most 7 and a / 2^-149 fits in 30 bits; the
    // rounded-up quotient is at most 2^23, whose bits are the subnormal (or 2^-126) scale itself.
    const uint32_t exponent = absmax_bits >> 23;
    const uint32_t units =
        exponent == 0 ? absmax_bits : ((absmax_bits & 0x7fffffu) | 0x800000u) << (exponent - 1);
    const uint32_t q = static_cast<uint32_t>(qmax);
    return float_of((units + q - 1) / q);
  }
#if defined(__CUDA_ARCH__)
  const float top = __fmul_rn(qmax_f, scale);
#else
  const float top = qmax_f * scale;
#endif
  if (magnitude_bits(top) >= kNonFiniteBits) scale = float_of(bits_of(scale) - 1);
  return scale;
}

// q = clamp(nearbyint(x / scale), -qmax, qmax) for a value of a finite block. A NaN scale (non-finite block)
// gives 0, also when called per value, so misuse can never reach an undefined float-to-int conversion.
GPT_HOST_DEVICE inline int quantize_value(float x, float scale, int qmax) {
  const float qmax_f = static_cast<float>(qmax);
#if defined(__CUDA_ARCH__)
  float r = rintf(__fdiv_rn(x, scale));
#else
  float r = std::nearbyint(x / scale);
#endif
  r = r > qmax_f ? qmax_f : r;
  r = r < -qmax_f ? -qmax_f : r;
  r = r == r ? r : 0.0f;
  return static_cast<int>(r);
}

// x' = q * scale (NaN for a non-finite block's NaN scale).
GPT_HOST_DEVICE inline float dequantize_value(int q, float scale) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(static_cast<float>(q), scale);
#else
  return static_cast<float>(q) * scale;
#endif
}

// a * b rounded on its own: a product the compiler can never fuse with a following addition (point 4 above),
// whatever the caller's flags.
GPT_HOST_DEVICE inline float unfused_product(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  float product = a * b;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __asm__("" : "+x"(product));  // the product is now an opaque register value: nothing to fuse it with
#elif defined(__aarch64__) && (defined(__GNUC__) || defined(__clang__))
  __asm__("" : "+w"(product));
#else
  volatile float opaque = product;
  product = opaque;
#endif
  return product;
#endif
}

// a + b and a - b, correctly rounded (named so that host and device spell the same operation).
GPT_HOST_DEVICE inline float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
GPT_HOST_DEVICE inline float sub_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

// acc + q * scale with two roundings, never one FMA (point 4 above).
GPT_HOST_DEVICE inline float dequantize_accumulate(float acc, int q, float scale) {
  return add_rn(acc, unfused_product(static_cast<float>(q), scale));
}

// LoCo error feedback around one quantizing hop of qgZ (the recurrence, and why, are in zero/qgz.h). Per
// element, with e the error this hop kept last time (dequantized from its int8 store):
//   h  = x + e                                   the value that is quantized instead of x
//   e' = beta * e + (1 - beta) * (h - q * s)     the error to keep, q * s being what h became on the wire
// one_minus_beta is 1 - beta rounded to fp32 once by the caller; every product, difference and sum is rounded
// on its own, so host and device keep the same bits.
GPT_HOST_DEVICE inline float compensate(float x, float kept_error) {
  return add_rn(x, kept_error);
}
GPT_HOST_DEVICE inline float feedback_error(float h, int q, float scale, float kept_error, float beta,
                                            float one_minus_beta) {
  const float lost = sub_rn(h, unfused_product(static_cast<float>(q), scale));
  return add_rn(unfused_product(beta, kept_error), unfused_product(one_minus_beta, lost));
}

// int4 codes travel two per byte, element 2k in the low nibble and 2k + 1 in the high one, each as a 4-bit
// two's complement number.
GPT_HOST_DEVICE inline uint8_t pack_int4(int low, int high) {
  return static_cast<uint8_t>((static_cast<unsigned>(low) & 0xfu) |
                              ((static_cast<unsigned>(high) & 0xfu) << 4));
}

// Sign-extends a nibble n: (n ^ 8) - 8 maps 0..7 to 0..7 and 8..15 to -8..-1.
GPT_HOST_DEVICE inline int unpack_int4_low(uint8_t byte) {
  return static_cast<int>((byte & 0xfu) ^ 8u) - 8;
}

GPT_HOST_DEVICE inline int unpack_int4_high(uint8_t byte) {
  return static_cast<int>((static_cast<unsigned>(byte) >> 4) ^ 8u) - 8;
}

}  // namespace gpt::quant
