// fp16/bf16 conversions at the values that matter (range ends, ties, subnormals, NaN policy), and the bulk
// array functions against the scalar ones, including odd lengths and in-place rounding.
#include "tensor/half.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace {

float from_bits(uint32_t bits) {
  return gpt::float_of(bits);
}

}  // namespace

TEST_CASE("fp32 -> fp16 at range ends, ties and subnormals") {
  CHECK(gpt::f32_to_f16(0.0f) == 0x0000);
  CHECK(gpt::f32_to_f16(-0.0f) == 0x8000);
  CHECK(gpt::f32_to_f16(1.0f) == 0x3c00);
  CHECK(gpt::f32_to_f16(-2.0f) == 0xc000);
  CHECK(gpt::f32_to_f16(65504.0f) == 0x7bff);  // largest finite
  CHECK(gpt::f32_to_f16(65519.99f) == 0x7bff);
  CHECK(gpt::f32_to_f16(65520.0f) == 0x7c00);  // the tie above it goes to the even neighbour: infinity
  CHECK(gpt::f32_to_f16(-1e9f) == 0xfc00);
  CHECK(gpt::f32_to_f16(std::numeric_limits<float>::infinity()) == 0x7c00);
  CHECK(gpt::f32_to_f16(std::ldexp(1.0f, -14)) == 0x0400);  // smallest normal
  CHECK(gpt::f32_to_f16(std::ldexp(1.0f, -24)) == 0x0001);  // smallest subnormal
  CHECK(gpt::f32_to_f16(std::ldexp(1.0f, -25)) == 0x0000);  // tie with 0: even wins
  CHECK(gpt::f32_to_f16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)) == 0x0001);
  CHECK(gpt::f32_to_f16(std::ldexp(3.0f, -25)) == 0x0002);         // 1.5 units: tie to even 2
  CHECK(gpt::f32_to_f16(std::ldexp(5.0f, -25)) == 0x0002);         // 2.5 units: tie to even 2
  CHECK(gpt::f32_to_f16(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);  // tie between 1 and 1+2^-10: even
  CHECK(gpt::f32_to_f16(1.0f + std::ldexp(3.0f, -11)) == 0x3c02);
  CHECK(gpt::f32_to_f16(from_bits(0x00000001)) == 0x0000);  // fp32 subnormal
  CHECK(gpt::f32_to_f16(from_bits(0x80000001)) == 0x8000);
}

TEST_CASE("NaN stays NaN, quiet, with its sign and top payload bits") {
  CHECK(gpt::f32_to_f16(from_bits(0x7fc00000)) == 0x7e00);
  CHECK(gpt::f32_to_f16(from_bits(0xffc00000)) == 0xfe00);
  CHECK(gpt::f32_to_f16(from_bits(0x7f800001)) == 0x7e00);  // signalling, payload below fp16's bits
  CHECK(gpt::f32_to_f16(from_bits(0x7f802000)) == 0x7e01);  // signalling, payload kept, made quiet
  CHECK(gpt::f32_to_bf16(from_bits(0x7f800001)) == 0x7fc0);
  CHECK(gpt::f32_to_bf16(from_bits(0xff810000)) == 0xffc1);
  CHECK(gpt::bits_of(gpt::f16_to_f32(0x7c01)) == 0x7fc02000);
  CHECK(gpt::bits_of(gpt::bf16_to_f32(0xff81)) == 0xffc10000);
  CHECK(std::isnan(gpt::round_to_f16(std::numeric_limits<float>::quiet_NaN())));
  CHECK(std::isnan(gpt::round_to_bf16(std::numeric_limits<float>::signaling_NaN())));
}

TEST_CASE("fp32 -> bf16 rounding, overflow and subnormals") {
  CHECK(gpt::f32_to_bf16(1.0f) == 0x3f80);
  CHECK(gpt::f32_to_bf16(from_bits(0x3f808000)) == 0x3f80);  // tie, even stays
  CHECK(gpt::f32_to_bf16(from_bits(0x3f818000)) == 0x3f82);  // tie, odd rounds up
  CHECK(gpt::f32_to_bf16(from_bits(0x3f808001)) == 0x3f81);
  CHECK(gpt::f32_to_bf16(std::numeric_limits<float>::max()) == 0x7f80);  // rounds past the largest bf16
  CHECK(gpt::f32_to_bf16(from_bits(0x7f7f7fff)) == 0x7f7f);
  CHECK(gpt::f32_to_bf16(-std::numeric_limits<float>::infinity()) == 0xff80);
  CHECK(gpt::f32_to_bf16(from_bits(0x00008000)) == 0x0000);  // subnormal tie, even
  CHECK(gpt::f32_to_bf16(from_bits(0x00018000)) == 0x0002);
  CHECK(gpt::f32_to_bf16(from_bits(0x807fffff)) ==
        0x8080);  // largest subnormal rounds to the smallest normal
}

TEST_CASE("fp16 -> fp32 of subnormals and extremes") {
  CHECK(gpt::f16_to_f32(0x0001) == std::ldexp(1.0f, -24));
  CHECK(gpt::f16_to_f32(0x03ff) == std::ldexp(1023.0f, -24));
  CHECK(gpt::f16_to_f32(0x8200) == -std::ldexp(1.0f, -15));
  CHECK(gpt::f16_to_f32(0x7bff) == 65504.0f);
  CHECK(gpt::f16_to_f32(0xfc00) == -std::numeric_limits<float>::infinity());
  CHECK(gpt::bits_of(gpt::f16_to_f32(0x8000)) == 0x80000000u);
}

TEST_CASE("bulk conversions equal the scalar functions, any length, rounding in place") {
  std::mt19937 rng(7);
  std::vector<float> values;
  for (int i = 0; i < 5000; ++i)
    values.push_back(gpt::float_of(static_cast<uint32_t>(rng())));  // any pattern
  std::normal_distribution<float> normal(0.0f, 0.02f);
  for (int i = 0; i < 5000; ++i) values.push_back(normal(rng));  // weight-like values
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{8}, int64_t{9}, int64_t{1003},
                    static_cast<int64_t>(values.size())}) {
    CAPTURE(n);
    std::vector<uint16_t> half(n), bf(n);
    std::vector<float> wide(n), rounded(values.begin(), values.begin() + n);
    gpt::f32_to_f16(values.data(), half.data(), n);
    gpt::f32_to_bf16(values.data(), bf.data(), n);
    int bad = 0;
    for (int64_t i = 0; i < n; ++i) {
      bad += half[i] != gpt::f32_to_f16(values[i]);
      bad += bf[i] != gpt::f32_to_bf16(values[i]);
    }
    gpt::f16_to_f32(half.data(), wide.data(), n);
    for (int64_t i = 0; i < n; ++i) bad += gpt::bits_of(wide[i]) != gpt::bits_of(gpt::f16_to_f32(half[i]));
    gpt::bf16_to_f32(bf.data(), wide.data(), n);
    for (int64_t i = 0; i < n; ++i) bad += gpt::bits_of(wide[i]) != gpt::bits_of(gpt::bf16_to_f32(bf[i]));
    gpt::round_to_f16(rounded.data(), rounded.data(), n);
    for (int64_t i = 0; i < n; ++i)
      bad += gpt::bits_of(rounded[i]) != gpt::bits_of(gpt::round_to_f16(values[i]));
    std::copy(values.begin(), values.begin() + n, rounded.begin());
    gpt::round_to_bf16(rounded.data(), rounded.data(), n);
    for (int64_t i = 0; i < n; ++i)
      bad += gpt::bits_of(rounded[i]) != gpt::bits_of(gpt::round_to_bf16(values[i]));
    CHECK(bad == 0);
  }
}

TEST_CASE("round_to_f16 is idempotent and moves values by at most half an fp16 step") {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> uniform(-60000.0f, 60000.0f);
  for (int i = 0; i < 10000; ++i) {
    const float x = uniform(rng) * std::ldexp(1.0f, -static_cast<int>(rng() % 20));
    const float r = gpt::round_to_f16(x);
    CHECK(gpt::round_to_f16(r) == r);
    const float ulp = std::ldexp(1.0f, std::max(std::ilogb(std::fabs(x)), -14) - 10);
    CHECK(std::fabs(r - x) <= 0.5f * ulp);
  }
}
