// Independent float64 reference of the block quantizers, for the quantizer tests: the scale, the codes and
// the error bound computed in double arithmetic from the scheme's definition (issue 5), never by calling
// kernels/quant. A double quotient or product of two floats, rounded once to float, is the correctly rounded
// fp32 result (53 >= 2 * 24 + 2 bits, Figueroa 1995), which is how fl32(a / b) is formed here without fp32
// division.
#pragma once

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

namespace gpt::quant::testing {

inline uint32_t bits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

inline int qmax_for(int bits_per_code) {
  return bits_per_code == 8 ? 127 : 7;
}

// Round half to even in double, written out: floor, then compare the (exact) fraction with one half.
inline double round_half_even(double t) {
  const double lower = std::floor(t);
  const double fraction = t - lower;
  if (fraction > 0.5) return lower + 1.0;
  if (fraction < 0.5) return lower;
  return std::fmod(lower, 2.0) == 0.0 ? lower : lower + 1.0;
}

// fp32 unit in the last place of a finite non-negative a (2^-149 for subnormals).
inline double ulp32(float a) {
  const int exponent = a == 0.0f ? -126 : std::max(std::ilogb(a), -126);
  return std::ldexp(1.0, exponent - 23);
}

// The scale of one block: NaN if any value is not finite, 1 for an all-zero block, else fl32(absmax / qmax)
// with the two edge rules: rounded up to a multiple of 2^-149 when below 2^-126, one ulp lower when
// qmax * scale would overflow fp32.
inline float reference_scale(const float* x, int64_t len, int qmax) {
  double absmax = 0.0;
  for (int64_t i = 0; i < len; ++i) {
    if (!std::isfinite(x[i])) return std::numeric_limits<float>::quiet_NaN();
    absmax = std::max(absmax, std::fabs(static_cast<double>(x[i])));
  }
  if (absmax == 0.0) return 1.0f;
  float scale = static_cast<float>(absmax / qmax);
  if (scale < FLT_MIN) return static_cast<float>(std::ceil(absmax * 0x1p149 / qmax) * 0x1p-149);
  // Rounding to fp32 overflows from FLT_MAX + half its ulp up (FLT_MAX's significand is odd: the tie goes
  // up).
  if (static_cast<double>(scale) * qmax >= static_cast<double>(FLT_MAX) + 0x1p103)
    scale = std::nextafter(scale, 0.0f);
  return scale;
}

// q = clamp(round_half_even(fl32(x / scale)), -qmax, qmax); 0 for a non-finite block.
inline int reference_code(float x, float scale, int qmax) {
  if (std::isnan(scale)) return 0;
  const float quotient = static_cast<float>(static_cast<double>(x) / static_cast<double>(scale));
  const double q = round_half_even(quotient);
  return static_cast<int>(std::clamp(q, -static_cast<double>(qmax), static_cast<double>(qmax)));
}

// fl32(q * scale).
inline float reference_value(int q, float scale) {
  return static_cast<float>(q * static_cast<double>(scale));
}

// One quantized slice read back from the wire bytes, independently of the library's unpacking.
struct Decoded {
  std::vector<int> codes;
  std::vector<float> scales;
};

inline Decoded decode_slice(const uint8_t* wire, int64_t n, int bits_per_code, int block) {
  Decoded d;
  const int64_t data = bits_per_code == 8 ? n : (n + 1) / 2;
  for (int64_t i = 0; i < n; ++i) {
    int code;
    if (bits_per_code == 8) {
      code = static_cast<int8_t>(wire[i]);
    } else {
      const int nibble = (i % 2 == 0) ? (wire[i / 2] & 0xf) : (wire[i / 2] >> 4);
      code = nibble >= 8 ? nibble - 16 : nibble;
    }
    d.codes.push_back(code);
  }
  for (int64_t b = 0; b * block < n; ++b) {
    float s;
    std::memcpy(&s, wire + data + 4 * b, sizeof s);
    d.scales.push_back(s);
  }
  return d;
}

}  // namespace gpt::quant::testing
