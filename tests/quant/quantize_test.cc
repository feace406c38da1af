// Tests of the bulk quantizers (kernels/quant/quantize.h), the acceptance list of issue 5 item 1: every code
// and scale bit-equal to the float64 reference, every error within scale/2 + ulp(absmax), max |q| == qmax at
// the absmax (no clipping), inf/NaN blocks, short last blocks, many slices, int4 packing at odd positions,
// the same bytes for the same input on 1 and 2 threads, and the fp16/bf16 entry points.
#include "kernels/quant/quantize.h"

#include <doctest/doctest.h>
#include <omp.h>

#include <cfloat>
#include <cmath>
#include <random>
#include <stdexcept>
#include <vector>

#include "tensor/half.h"
#include "tests/quant/reference.h"

namespace gpt::quant {
namespace {

using testing::bits;
using testing::decode_slice;

// Quantizes x as one slice and checks every scale, code and dequantized value against the reference, and
// the error bound; returns the number of violations (0 expected) and reports the first.
int64_t check_against_reference(const std::vector<float>& x, int bits_per_code, int block) {
  const int64_t n = static_cast<int64_t>(x.size());
  const int qmax = testing::qmax_for(bits_per_code);
  std::vector<uint8_t> wire(quantized_bytes(n, bits_per_code, block));
  const bool finite = quantize_slice(x.data(), n, bits_per_code, block, wire.data());
  std::vector<float> back(x.size()), acc(x.size(), 0.25f);
  dequantize_slice(wire.data(), n, bits_per_code, block, back.data());
  dequantize_add(wire.data(), n, bits_per_code, block, acc.data());
  const testing::Decoded d = decode_slice(wire.data(), n, bits_per_code, block);

  int64_t bad = 0;
  bool all_finite = true;
  for (int64_t b = 0; b * block < n; ++b) {
    const int64_t first = b * block, len = std::min<int64_t>(block, n - first);
    const float scale = testing::reference_scale(&x[first], len, qmax);
    if (bits(d.scales[b]) != bits(scale) && !(std::isnan(scale) && bits(d.scales[b]) == 0x7fc00000u)) {
      if (bad++ == 0) FAIL_CHECK("block " << b << ": scale " << d.scales[b] << " != reference " << scale);
    }
    all_finite = all_finite && !std::isnan(scale);
    double absmax = 0.0;
    int max_code = 0;
    for (int64_t i = first; i < first + len; ++i) absmax = std::max(absmax, std::fabs(double(x[i])));
    for (int64_t i = first; i < first + len; ++i) {
      const int q = testing::reference_code(x[i], scale, qmax);
      const float value = testing::reference_value(q, scale);
      const float added = static_cast<float>(0.25 + static_cast<double>(value));
      max_code = std::max(max_code, std::abs(d.codes[i]));
      const double bound = scale / 2.0 + testing::ulp32(static_cast<float>(absmax));
      const bool error_ok = std::isnan(scale) || std::fabs(double(x[i]) - double(back[i])) <= bound;
      const bool same_value = bits(back[i]) == bits(value) || (std::isnan(value) && std::isnan(back[i]));
      const bool same_sum = bits(acc[i]) == bits(added) || (std::isnan(added) && std::isnan(acc[i]));
      if (d.codes[i] != q || !same_value || !same_sum || !error_ok) {
        if (bad++ == 0)
          FAIL_CHECK("element " << i << ": x " << x[i] << " scale " << scale << " code " << d.codes[i]
                                << " (reference " << q << ") x' " << back[i] << " (reference " << value
                                << ")");
      }
    }
    // No clipping: a block whose scale is normal reaches qmax exactly at its absmax.
    if (std::isfinite(scale) && absmax > 0.0 && scale >= FLT_MIN && max_code != qmax) {
      if (bad++ == 0) FAIL_CHECK("block " << b << ": max |q| " << max_code << " != qmax " << qmax);
    }
  }
  if (finite != all_finite && bad++ == 0) FAIL_CHECK("finite flag " << finite << " != " << all_finite);
  return bad;
}

// Random data with magnitudes drawn per block over the whole fp32 range (subnormal to near FLT_MAX), so
// that scales of every exponent, subnormal scales included, are exercised.
std::vector<float> wide_range_data(int64_t n, int block, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-149, 126);
  std::vector<float> x(n);
  for (int64_t first = 0; first < n; first += block) {
    const int e = exponent(rng);
    for (int64_t i = first; i < std::min<int64_t>(n, first + block); ++i)
      x[i] = std::ldexp(normal(rng), e);  // values beyond FLT_MAX become inf: covered by the reference
  }
  return x;
}

TEST_CASE("codes, scales and values equal the float64 reference on random data") {
  std::mt19937_64 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f), weight(0.0f, 0.02f);
  std::uniform_real_distribution<float> uniform(-3.0f, 3.0f);
  for (int bits_per_code : {8, 4}) {
    for (int block : {8, 64, 512, 2048}) {
      CAPTURE(bits_per_code);
      CAPTURE(block);
      const int64_t n = 3 * block + 5;  // a short last block, odd for int4
      std::vector<float> gauss(n), weights(n), flat(n);
      for (auto& v : gauss) v = normal(rng);
      for (auto& v : weights) v = weight(rng);
      for (int64_t i = 0; i < n; i += 97) weights[i] *= 40.0f;  // outliers
      for (auto& v : flat) v = uniform(rng);
      CHECK(check_against_reference(gauss, bits_per_code, block) == 0);
      CHECK(check_against_reference(weights, bits_per_code, block) == 0);
      CHECK(check_against_reference(flat, bits_per_code, block) == 0);
      CHECK(check_against_reference(wide_range_data(40 * block + 3, block, block + bits_per_code),
                                    bits_per_code, block) == 0);
    }
  }
}

TEST_CASE("adversarial blocks: ties, +-absmax, subnormals, extremes, zeros") {
  for (int bits_per_code : {8, 4}) {
    CAPTURE(bits_per_code);
    const int qmax = testing::qmax_for(bits_per_code);
    const int block = 32;
    std::vector<float> x;
    auto add_block = [&](std::vector<float> values) {
      values.resize(block, values.empty() ? 0.0f : values.back());
      x.insert(x.end(), values.begin(), values.end());
    };
    for (float scale : {1.0f, 0x1p-7f, 0x1p90f, 0x1p-125f}) {  // ties exactly at k + 1/2 (scale a power of 2)
      std::vector<float> ties = {qmax * scale};
      for (int k = -qmax; k < qmax; ++k) ties.push_back((k + 0.5f) * scale);
      for (size_t first = 0; first < ties.size(); first += block - 1) {
        std::vector<float> part = {qmax * scale};
        for (size_t i = first; i < std::min(ties.size(), first + block - 1); ++i) part.push_back(ties[i]);
        add_block(part);
      }
    }
    add_block({0.3f, -0.3f, 0.1f, -0.29999998f, 0.15f});             // both signs equal to absmax
    add_block({0x1p-149f, -0x1p-149f, 3 * 0x1p-149f, 0x1p-140f});    // all subnormal
    add_block({190 * 0x1p-149f, -0x1p-149f, 95 * 0x1p-149f});        // subnormal scale, rounded up
    add_block({FLT_MIN, -FLT_MIN / 3, 0x1p-130f});                   // normal absmax, subnormal scale
    add_block({FLT_MAX, -FLT_MAX, 1e38f, -3e37f, 1.0f, 0x1p-149f});  // top of the range
    add_block({1e-30f, -1e30f, 1e-45f, 7.0f});                       // huge and tiny together
    add_block({0.0f, -0.0f});                                        // all zero: scale 1
    add_block({-0.0f, 0.0f, -0.0f});
    CHECK(check_against_reference(x, bits_per_code, block) == 0);

    std::vector<uint8_t> wire(quantized_bytes(static_cast<int64_t>(x.size()), bits_per_code, block));
    quantize_slice(x.data(), static_cast<int64_t>(x.size()), bits_per_code, block, wire.data());
    std::vector<float> back(x.size());
    dequantize_slice(wire.data(), static_cast<int64_t>(x.size()), bits_per_code, block, back.data());
    for (size_t i = 0; i < x.size(); ++i) REQUIRE(std::isfinite(back[i]));  // finite in, finite out
  }
}

TEST_CASE("blocks holding +inf, -inf or NaN get scale NaN and codes 0; other blocks are unaffected") {
  const int block = 16;
  for (int bits_per_code : {8, 4}) {
    for (float bad : {INFINITY, -INFINITY, NAN, -NAN}) {
      CAPTURE(bits_per_code);
      CAPTURE(bad);
      std::mt19937_64 rng(11);
      std::normal_distribution<float> normal(0.0f, 1.0f);
      const int64_t n = 5 * block + 7;  // the poisoned last block is short (odd)
      std::vector<float> x(n);
      for (auto& v : x) v = normal(rng);
      x[block + 3] = bad;
      x[4 * block + 1] = bad;
      x[n - 1] = bad;
      CHECK(check_against_reference(x, bits_per_code, block) == 0);

      std::vector<uint8_t> wire(quantized_bytes(n, bits_per_code, block));
      CHECK_FALSE(quantize_slice(x.data(), n, bits_per_code, block, wire.data()));
      const testing::Decoded d = decode_slice(wire.data(), n, bits_per_code, block);
      std::vector<float> back(n);
      dequantize_slice(wire.data(), n, bits_per_code, block, back.data());
      for (int64_t b : {1, 4, 5}) {
        CHECK(bits(d.scales[b]) == 0x7fc00000u);
        for (int64_t i = b * block; i < std::min(n, (b + 1) * block); ++i) {
          CHECK(d.codes[i] == 0);
          CHECK(std::isnan(back[i]));
        }
      }
      // The clean blocks are byte-for-byte what they are when quantized alone.
      for (int64_t b : {0, 2, 3}) {
        std::vector<uint8_t> alone(quantized_bytes(block, bits_per_code, block));
        CHECK(quantize_slice(&x[b * block], block, bits_per_code, block, alone.data()));
        const testing::Decoded a = decode_slice(alone.data(), block, bits_per_code, block);
        CHECK(bits(a.scales[0]) == bits(d.scales[b]));
        for (int64_t i = 0; i < block; ++i) CHECK(a.codes[i] == d.codes[b * block + i]);
      }
    }
  }
}

TEST_CASE("wire sizes, short last blocks and many slices") {
  CHECK(quantized_bytes(0, 8, 512) == 0);
  CHECK(quantized_bytes(1, 4, 8) == 1 + 4);
  CHECK(quantized_bytes(1000, 8, 512) == 1000 + 2 * 4);
  CHECK(quantized_bytes(1001, 4, 512) == 501 + 2 * 4);
  CHECK(quantized_bytes(2048, 8, 2048) == 2048 + 4);
  CHECK(block_count(513, 512) == 2);
  CHECK(valid_block_size(8));
  CHECK_FALSE(valid_block_size(0));
  CHECK_FALSE(valid_block_size(12));
  CHECK_FALSE(valid_block_size(-8));
  CHECK_THROWS_AS(quantize_slice(nullptr, 0, 8, 12, nullptr), std::invalid_argument);
  CHECK_THROWS_AS(dequantize_add(nullptr, 0, 3, 8, nullptr), std::invalid_argument);
  CHECK_THROWS_AS(quantize_slice(nullptr, -1, 4, 8, nullptr), std::invalid_argument);

  // W slices quantize exactly as W separate calls: blocks restart at every slice, none spans two.
  for (int bits_per_code : {8, 4}) {
    for (int64_t slice_len : {1, 7, 40, 1000, 1029}) {
      CAPTURE(bits_per_code);
      CAPTURE(slice_len);
      const int block = 64, count = 5;
      const std::vector<float> x = wide_range_data(slice_len * count, 16, slice_len);
      const size_t each = quantized_bytes(slice_len, bits_per_code, block);
      std::vector<uint8_t> together(each * count), apart(each * count);
      quantize_slices(x.data(), slice_len, count, bits_per_code, block, together.data());
      for (int i = 0; i < count; ++i)
        quantize_slice(&x[i * slice_len], slice_len, bits_per_code, block, &apart[i * each]);
      CHECK(together == apart);
      CHECK(check_against_reference(std::vector<float>(x.begin(), x.begin() + slice_len), bits_per_code,
                                    block) == 0);

      std::vector<float> back(x.size()), back_apart(x.size()), acc(x.size(), 1.0f), acc_apart(x.size(), 1.0f);
      dequantize_slices(together.data(), slice_len, count, bits_per_code, block, back.data());
      dequantize_add_slices(together.data(), slice_len, count, bits_per_code, block, acc.data());
      for (int i = 0; i < count; ++i) {
        dequantize_slice(&apart[i * each], slice_len, bits_per_code, block, &back_apart[i * slice_len]);
        dequantize_add(&apart[i * each], slice_len, bits_per_code, block, &acc_apart[i * slice_len]);
      }
      CHECK(std::memcmp(back.data(), back_apart.data(), back.size() * sizeof(float)) == 0);
      CHECK(std::memcmp(acc.data(), acc_apart.data(), acc.size() * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("int4 packing through the bulk path: every code at even and odd positions, odd lengths") {
  // Scale 1 (absmax 7): the codes are the values. Each value -7..7 sits after each value, so it appears in
  // both nibbles; odd lengths leave the last high nibble 0.
  std::vector<float> x;
  for (int a = -7; a <= 7; ++a)
    for (int b = -7; b <= 7; ++b) x.insert(x.end(), {7.0f, float(a), float(b)});
  for (int64_t n : {int64_t(x.size()), int64_t(x.size()) - 1, int64_t(1), int64_t(2), int64_t(3)}) {
    CAPTURE(n);
    std::vector<float> values(x.begin(), x.begin() + n);
    values[0] = 7.0f;
    std::vector<uint8_t> wire(quantized_bytes(n, 4, 1 << 20));
    quantize_slice(values.data(), n, 4, 1 << 20, wire.data());
    for (int64_t i = 0; i < n; ++i) {
      const int code = static_cast<int>(values[i]);
      const uint8_t nibble = (i % 2 == 0) ? (wire[i / 2] & 0xf) : (wire[i / 2] >> 4);
      CHECK(nibble == (code & 0xf));
    }
    if (n % 2 != 0) CHECK((wire[n / 2] >> 4) == 0);
    std::vector<float> back(n);
    dequantize_slice(wire.data(), n, 4, 1 << 20, back.data());
    CHECK(back == values);
  }
}

TEST_CASE("the same input gives the same bytes, on 1 and on 2 threads") {
  const int before = omp_get_max_threads();
  const int64_t n = (int64_t{1} << 18) + 333;  // above the parallel threshold
  for (int bits_per_code : {8, 4}) {
    for (int block : {64, 2048}) {
      CAPTURE(bits_per_code);
      CAPTURE(block);
      std::vector<float> x = wide_range_data(n, 128, 99);
      x[n / 3] = NAN;
      std::vector<uint8_t> runs[3];
      std::vector<float> sums[3];
      for (int run = 0; run < 3; ++run) {
        omp_set_num_threads(run == 0 ? 1 : 2);
        runs[run].resize(3 * quantized_bytes(n / 3, bits_per_code, block));
        quantize_slices(x.data(), n / 3, 3, bits_per_code, block, runs[run].data());
        sums[run].assign(n, -2.0f);
        dequantize_add_slices(runs[run].data(), n / 3, 3, bits_per_code, block, sums[run].data());
      }
      CHECK(runs[0] == runs[1]);
      CHECK(runs[1] == runs[2]);
      CHECK(std::memcmp(sums[0].data(), sums[1].data(), n * sizeof(float)) == 0);
    }
  }
  omp_set_num_threads(before);
}

TEST_CASE("fp16 and bf16 input is widened exactly; round_to gives the compute dtype's weights") {
  std::mt19937_64 rng(3);
  std::normal_distribution<float> weight(0.0f, 0.02f);
  const int64_t n = 3000;
  const int block = 512;
  std::vector<float> x(n);
  for (auto& v : x) v = weight(rng);
  x[17] = 65504.0f;  // the fp16 maximum
  std::vector<uint16_t> f16(n), b16(n);
  std::vector<float> f16_wide(n), b16_wide(n);
  for (int64_t i = 0; i < n; ++i) {
    f16[i] = f32_to_f16(x[i]);
    b16[i] = f32_to_bf16(x[i]);
    f16_wide[i] = f16_to_f32(f16[i]);
    b16_wide[i] = bf16_to_f32(b16[i]);
  }
  const size_t bytes = quantized_bytes(n, 8, block);
  std::vector<uint8_t> from_half(bytes), from_wide(bytes), from_f32(bytes), from_f32_void(bytes);
  quantize_slice(f16.data(), DType::kF16, n, 8, block, from_half.data());
  quantize_slice(f16_wide.data(), n, 8, block, from_wide.data());
  CHECK(from_half == from_wide);
  quantize_slice(b16.data(), DType::kBF16, n, 8, block, from_half.data());
  quantize_slice(b16_wide.data(), n, 8, block, from_wide.data());
  CHECK(from_half == from_wide);
  quantize_slice(x.data(), n, 8, block, from_f32.data());
  quantize_slice(static_cast<const void*>(x.data()), DType::kF32, n, 8, block, from_f32_void.data());
  CHECK(from_f32 == from_f32_void);
  CHECK_THROWS_AS(quantize_slice(x.data(), DType::kI8, n, 8, block, from_f32.data()), std::invalid_argument);

  std::vector<float> plain(n), as_f16(n), as_bf16(n);
  dequantize_slice(from_f32.data(), n, 8, block, plain.data());
  dequantize_slice(from_f32.data(), n, 8, block, as_f16.data(), DType::kF16);
  dequantize_slice(from_f32.data(), n, 8, block, as_bf16.data(), DType::kBF16);
  for (int64_t i = 0; i < n; ++i) {
    CHECK(bits(as_f16[i]) == bits(f16_to_f32(f32_to_f16(plain[i]))));
    CHECK(bits(as_bf16[i]) == bits(bf16_to_f32(f32_to_bf16(plain[i]))));
  }

  // Blocks whose values land on fp16's subnormals, its largest values and beyond (inf), through the bulk
  // decode's vector body and its tail (an odd length): each equals the scalar rounding of the fp32 value.
  std::uniform_real_distribution<float> mantissa(0.0f, 1.0f);
  std::vector<float> wide(1003);  // block b (of 64 values) spans magnitudes up to 2^(b * 3 - 28)
  for (size_t i = 0; i < wide.size(); ++i)
    wide[i] = (i % 3 == 0 ? -1.0f : 1.0f) * mantissa(rng) * std::exp2(float(int(i / 64) * 3 - 28));
  for (int bits_per_code : {8, 4}) {
    const int64_t len = static_cast<int64_t>(wide.size());
    std::vector<uint8_t> wire(quantized_bytes(len, bits_per_code, 64));
    quantize_slice(wide.data(), len, bits_per_code, 64, wire.data());
    std::vector<float> exact(len), rounded(len);
    dequantize_slice(wire.data(), len, bits_per_code, 64, exact.data());
    dequantize_slice(wire.data(), len, bits_per_code, 64, rounded.data(), DType::kF16);
    int64_t subnormal = 0, infinite = 0, bad = 0;
    for (int64_t i = 0; i < len; ++i) {
      const float want = f16_to_f32(f32_to_f16(exact[i]));
      subnormal += want != 0.0f && std::fabs(want) < 6.103515625e-05f;
      infinite += std::isinf(want);
      bad += bits(rounded[i]) != bits(want);
    }
    CHECK(bad == 0);
    CHECK(subnormal > 0);  // the cases this part is for were reached
    CHECK(infinite > 0);
  }
}

TEST_CASE("error feedback: three steps equal the float64 recurrence; a non-finite block clears its error") {
  std::mt19937_64 rng(21);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int block = 64;
  const int64_t n = 203, count = 3;  // short last blocks, odd for int4
  const size_t error_slice = quantized_bytes(n, 8, block);
  for (int bits_per_code : {4, 8}) {
    for (float beta : {0.0f, 0.5f, 0.8f}) {
      CAPTURE(bits_per_code);
      CAPTURE(beta);
      const size_t slice_bytes = quantized_bytes(n, bits_per_code, block);
      std::vector<uint8_t> error(count * error_slice, 0), out(count * slice_bytes);
      std::vector<testing::Decoded> kept(count);
      for (int step = 0; step < 4; ++step) {
        std::vector<float> x(count * n);
        for (int64_t i = 0; i < count * n; ++i) x[i] = normal(rng) * ((i / block) % 3 == 0 ? 1e-3f : 1.0f);
        if (step == 3) x[n + 5] = std::numeric_limits<float>::infinity();  // slice 1, block 0
        const bool finite = quantize_slices_with_feedback(x.data(), n, count, bits_per_code, block, beta,
                                                          error.data(), out.data());
        CHECK(finite == (step != 3));
        if (step == 0) {  // nothing kept yet: the wire is plain quantization
          std::vector<uint8_t> plain(out.size());
          quantize_slices(x.data(), n, count, bits_per_code, block, plain.data());
          CHECK(plain == out);
        }
        for (int64_t s = 0; s < count; ++s) {
          CAPTURE(step);
          CAPTURE(s);
          const testing::Decoded wire =
              testing::reference_feedback_hop(&x[s * n], n, bits_per_code, block, beta, kept[s]);
          const std::vector<uint8_t> expected_wire = testing::encode_slice(wire, bits_per_code);
          const std::vector<uint8_t> expected_error = testing::encode_slice(kept[s], 8);
          CHECK(std::equal(expected_wire.begin(), expected_wire.end(), out.begin() + s * slice_bytes));
          CHECK(std::equal(expected_error.begin(), expected_error.end(), error.begin() + s * error_slice));
        }
      }
      const testing::Decoded cleared = testing::decode_slice(&error[error_slice], n, 8, block);
      CHECK(cleared.scales[0] == 0.0f);
      CHECK(std::all_of(cleared.codes.begin(), cleared.codes.begin() + block, [](int c) { return c == 0; }));
    }
  }
}

TEST_CASE("error feedback changes nothing on the grid: the kept error stays zero, the wire is plain") {
  const int block = 16;
  for (int bits_per_code : {4, 8}) {
    const int qmax = testing::qmax_for(bits_per_code);
    std::vector<float> x(5 * block);
    for (size_t i = 0; i < x.size(); ++i) {
      // Multiples of 2^-6 with |k| <= qmax and +-qmax in every block: the scale is exactly 2^-6.
      const int k = i % block == 0 ? qmax : int(i * 7 % (2 * qmax + 1)) - qmax;
      x[i] = std::ldexp(float(k), -6);
    }
    std::vector<uint8_t> error(quantized_bytes(int64_t(x.size()), 8, block), 0),
        out(quantized_bytes(int64_t(x.size()), bits_per_code, block)), plain(out.size());
    quantize_slices(x.data(), int64_t(x.size()), 1, bits_per_code, block, plain.data());
    for (int step = 0; step < 3; ++step) {
      quantize_slices_with_feedback(x.data(), int64_t(x.size()), 1, bits_per_code, block, 0.8f, error.data(),
                                    out.data());
      CHECK(out == plain);
      std::vector<float> kept(x.size(), 1.0f);
      dequantize_slice(error.data(), int64_t(x.size()), 8, block, kept.data());
      CHECK(std::all_of(kept.begin(), kept.end(), [](float e) { return e == 0.0f; }));
    }
  }
}

}  // namespace
}  // namespace gpt::quant
