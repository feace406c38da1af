// Independent float64 reference of the block quantizers, for the quantizer tests: the scale, the codes and
// the error bound computed in double arithmetic from the scheme's definition (issue 5), never by calling
// kernels/quant. A double quotient or product of two floats, rounded once to float, is the correctly rounded
// fp32 result (53 >= 2 * 24 + 2 bits, Figueroa 1995), which is how fl32(a / b) is formed here without fp32
// division. A file that includes this must be compiled with -ffp-contract=off: GCC fuses a rounded product
// with a following addition under -march=native otherwise, and the reference would round once too few.
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

// The codes and scales of x as one slice, block by block, by the definitions above.
inline Decoded reference_quantize(const float* x, int64_t n, int bits_per_code, int block) {
  Decoded d;
  const int qmax = qmax_for(bits_per_code);
  for (int64_t first = 0; first < n; first += block) {
    const int64_t len = std::min<int64_t>(block, n - first);
    const float scale = reference_scale(x + first, len, qmax);
    d.scales.push_back(scale);
    for (int64_t i = first; i < first + len; ++i) d.codes.push_back(reference_code(x[i], scale, qmax));
  }
  return d;
}

// Value i of a decoded slice: fl32(q * scale).
inline float reference_dequantized(const Decoded& d, int64_t i, int block) {
  return reference_value(d.codes[size_t(i)], d.scales[size_t(i / block)]);
}

// The wire bytes of a decoded slice (codes, then scales), written independently of the library's packing.
inline std::vector<uint8_t> encode_slice(const Decoded& d, int bits_per_code) {
  const size_t n = d.codes.size();
  std::vector<uint8_t> wire(bits_per_code == 8 ? n : (n + 1) / 2, 0);
  for (size_t i = 0; i < n; ++i) {
    const unsigned code = static_cast<unsigned>(d.codes[i]);
    if (bits_per_code == 8) {
      wire[i] = static_cast<uint8_t>(code & 0xffu);
    } else {
      wire[i / 2] = static_cast<uint8_t>(wire[i / 2] | ((code & 0xfu) << (i % 2 == 0 ? 0 : 4)));
    }
  }
  for (float s : d.scales) {
    uint8_t b[4];
    std::memcpy(b, &s, 4);
    wire.insert(wire.end(), b, b + 4);
  }
  return wire;
}

// LoCo's error feedback around one quantizing hop (zero/qgz.h), in double with each operation rounded to fp32
// once (the correctly rounded fp32 result, as above): h = fl(x + e), the wire's Q(h), and the kept error
// replaced by int8(fl(fl(beta e) + fl((1 - beta) fl(h - fl(q s))))), 1 - beta itself rounded to fp32. `kept`
// holds the int8 codes and scales of e (empty: no error kept yet). A non-finite block clears its kept error
// (codes 0, scale 0).
inline Decoded reference_feedback_hop(const float* x, int64_t n, int bits_per_code, int block, float beta,
                                      Decoded& kept) {
  auto fl = [](double v) { return static_cast<float>(v); };
  std::vector<float> e(static_cast<size_t>(n), 0.0f), h(static_cast<size_t>(n));
  if (!kept.codes.empty()) {
    for (int64_t i = 0; i < n; ++i) e[size_t(i)] = reference_dequantized(kept, i, block);
  }
  for (int64_t i = 0; i < n; ++i) h[size_t(i)] = fl(double(x[i]) + double(e[size_t(i)]));
  const Decoded wire = reference_quantize(h.data(), n, bits_per_code, block);
  const float one_minus_beta = fl(1.0 - double(beta));
  std::vector<float> next(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const float lost = fl(double(h[size_t(i)]) - double(reference_dequantized(wire, i, block)));
    next[size_t(i)] = fl(double(fl(double(beta) * e[size_t(i)])) + double(fl(double(one_minus_beta) * lost)));
  }
  kept = reference_quantize(next.data(), n, 8, block);
  for (size_t b = 0; b < wire.scales.size(); ++b) {
    if (!std::isnan(wire.scales[b])) continue;
    kept.scales[b] = 0.0f;
    for (int64_t i = int64_t(b) * block; i < std::min<int64_t>(n, int64_t(b + 1) * block); ++i)
      kept.codes[size_t(i)] = 0;
  }
  return wire;
}

}  // namespace gpt::quant::testing
