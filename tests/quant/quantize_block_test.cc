// Tests of the per-block quantizer math (kernels/quant/quantize_block.h) against the float64 reference: the
// scale over every absmax pattern where its edge rules act, round-half-even ties, values at +-absmax, the NaN
// guard, LoCo's per-element feedback, and every int4 nibble through pack and unpack.
#include "kernels/quant/quantize_block.h"

#include <doctest/doctest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>

#include "tests/quant/reference.h"

namespace gpt::quant {
namespace {

using testing::bits;
using testing::reference_code;
using testing::reference_scale;

float from_bits(uint32_t b) {
  float x;
  std::memcpy(&x, &b, sizeof x);
  return x;
}

// Counts absmax patterns in [first, last) (step `stride`) whose scale differs from the reference or breaks
// the no-clip promise (absmax / scale must round to at most qmax + 1/2).
int64_t scale_mismatches(uint32_t first, uint32_t last, uint32_t stride, int qmax) {
  int64_t bad = 0;
  for (uint32_t b = first; b < last; b += stride) {
    const float absmax = from_bits(b);
    const float scale = block_scale(b, qmax);
    const bool same = bits(scale) == bits(reference_scale(&absmax, 1, qmax));
    const bool finite_top = std::isfinite(qmax * static_cast<double>(scale)) &&
                            static_cast<float>(qmax * static_cast<double>(scale)) <= FLT_MAX;
    const bool no_clip = static_cast<double>(absmax) / scale <= qmax + 0.5;
    bad += !(same && finite_top && no_clip && scale > 0.0f);
  }
  return bad;
}

TEST_CASE("block scale equals the reference over subnormal, threshold and top-of-range absmax") {
  for (int qmax : {127, 7}) {
    CAPTURE(qmax);
    CHECK(scale_mismatches(1, 0x00800000u, 1, qmax) == 0);             // every subnormal absmax
    CHECK(scale_mismatches(0x00800000u, 0x04800000u, 61, qmax) == 0);  // up to where scales turn normal
    CHECK(scale_mismatches(0x3f000000u, 0x3f800000u, 97, qmax) == 0);  // [0.5, 1): an ordinary binade
    CHECK(scale_mismatches(0x7f000000u, 0x7f7f0000u, 97, qmax) == 0);  // the top binade
    CHECK(scale_mismatches(0x7f7f0000u, 0x7f800000u, 1, qmax) == 0);   // its last 2^16, FLT_MAX included
  }
}

TEST_CASE("block scale edge rules") {
  SUBCASE("zero, inf and NaN") {
    CHECK(block_scale(0, 127) == 1.0f);
    CHECK(bits(block_scale(magnitude_bits(-0.0f), 7)) == bits(1.0f));
    CHECK(bits(block_scale(magnitude_bits(-INFINITY), 127)) == kScaleNaNBits);
    CHECK(bits(block_scale(magnitude_bits(-NAN), 7)) == kScaleNaNBits);
    CHECK(bits(block_scale(0x7f800001u, 7)) == kScaleNaNBits);  // a signalling NaN
    CHECK_FALSE(block_is_finite(magnitude_bits(INFINITY)));
    CHECK(block_is_finite(magnitude_bits(-FLT_MAX)));
  }
  SUBCASE("subnormal scales round up, so nothing clips") {
    // Nearest rounding would give 2^-149 for 190 * 2^-149 / 127 = 1.496 * 2^-149, and 190 would clip to 127.
    const float absmax = 190 * 0x1p-149f;
    CHECK(block_scale(bits(absmax), 127) == 2 * 0x1p-149f);
    CHECK(quantize_value(absmax, block_scale(bits(absmax), 127), 127) == 95);
    CHECK(block_scale(bits(0x1p-149f), 7) == 0x1p-149f);  // nearest would underflow to 0
    CHECK(block_scale(bits(127 * 0x1p-149f), 127) == 0x1p-149f);
  }
  SUBCASE("FLT_MAX keeps its dequantized values finite") {
    const float scale = block_scale(bits(FLT_MAX), 127);
    CHECK(scale == std::nextafter(FLT_MAX / 127.0f, 0.0f));
    CHECK(quantize_value(FLT_MAX, scale, 127) == 127);
    CHECK(std::isfinite(dequantize_value(127, scale)));
    CHECK(block_scale(bits(FLT_MAX), 7) == FLT_MAX / 7.0f);  // int4 needs no correction
  }
}

TEST_CASE("quantize_value rounds ties to even and maps +-absmax to +-qmax") {
  for (int qmax : {127, 7}) {
    for (float scale : {1.0f, 0x1p-3f, 0x1p100f, 0x1p-120f, 0x1p-140f}) {
      CAPTURE(qmax);
      CAPTURE(scale);
      for (int k = -qmax; k < qmax; ++k) {
        const float tie = (k + 0.5f) * scale;  // exact: k + 1/2 has at most 9 significant bits
        const int even = (k % 2 == 0) ? k : k + 1;
        CHECK(quantize_value(tie, scale, qmax) == even);
        CHECK(quantize_value(tie, scale, qmax) == reference_code(tie, scale, qmax));
      }
      CHECK(quantize_value(qmax * scale, scale, qmax) == qmax);
      CHECK(quantize_value(-qmax * scale, scale, qmax) == -qmax);
    }
    const float absmax = 0.7f;
    const float scale = block_scale(bits(absmax), qmax);
    CHECK(quantize_value(absmax, scale, qmax) == qmax);
    CHECK(quantize_value(-absmax, scale, qmax) == -qmax);
    CHECK(quantize_value(-0.0f, scale, qmax) == 0);
  }
  CHECK(quantize_value(1.0f, NAN, 127) == 0);  // the NaN guard: never an undefined conversion
  CHECK(quantize_value(INFINITY, NAN, 7) == 0);
  CHECK(std::isnan(dequantize_value(0, NAN)));
}

TEST_CASE("dequantize_value and dequantize_accumulate round once per operation") {
  const float scale = 0.0123f;
  for (int q = -127; q <= 127; ++q) {
    CHECK(bits(dequantize_value(q, scale)) == bits(testing::reference_value(q, scale)));
    const float acc = 1.0f / 3.0f;
    const float expected = static_cast<float>(static_cast<double>(acc) + testing::reference_value(q, scale));
    CHECK(bits(dequantize_accumulate(acc, q, scale)) == bits(expected));
  }
}

TEST_CASE("LoCo's per-element feedback: compensate and feedback_error round each operation once") {
  // Off-grid values over several magnitudes, a scale that is not a power of two, and betas whose 1 - beta
  // is inexact in fp32 (0.8, 0.3) or exact (0, 0.5).
  const float scale = 0.0123f, kept_errors[] = {0.0f, -0.0041f, 3.3e-7f, 0.00612f};
  for (float beta : {0.0f, 0.3f, 0.5f, 0.8f}) {
    const float one_minus_beta = static_cast<float>(1.0 - double(beta));
    for (float x : {0.1f, -0.0777f, 1e-5f, 0.0864f, -0.05f}) {
      for (float kept : kept_errors) {
        const float h = compensate(x, kept);
        CHECK(bits(h) == bits(static_cast<float>(double(x) + double(kept))));
        const int q = quantize_value(h, scale, 7);
        const float lost = static_cast<float>(double(h) - double(testing::reference_value(q, scale)));
        const float expected = static_cast<float>(double(static_cast<float>(double(beta) * double(kept))) +
                                                  double(static_cast<float>(double(one_minus_beta) * lost)));
        CHECK(bits(feedback_error(h, q, scale, kept, beta, one_minus_beta)) == bits(expected));
      }
    }
  }
}

TEST_CASE("int4 nibbles: every pair of values round-trips, element 2k low, 2k + 1 high") {
  for (int low = -8; low <= 7; ++low) {
    for (int high = -8; high <= 7; ++high) {
      const uint8_t byte = pack_int4(low, high);
      CHECK(unpack_int4_low(byte) == low);
      CHECK(unpack_int4_high(byte) == high);
      CHECK((byte & 0xf) == (low & 0xf));
      CHECK((byte >> 4) == (high & 0xf));
    }
  }
  CHECK(pack_int4(-1, 0) == 0x0f);
  CHECK(pack_int4(0, -1) == 0xf0);
  CHECK(pack_int4(7, -7) == 0x97);
  CHECK(qmax_of(8) == 127);
  CHECK(qmax_of(4) == 7);
}

}  // namespace
}  // namespace gpt::quant
