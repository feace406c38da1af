// Exhaustive checks of the fp16/bf16 conversions in tensor/half.h: every one of the 2^32 fp32 bit patterns
// through fp32 -> fp16 (against the CPU's F16C instruction) and fp32 -> bf16 (against a nearest-neighbour
// reference written in double arithmetic), and all 65,536 patterns of fp16 -> fp32 and bf16 -> fp32.
// The sweeps run on two threads; tests/tensor/BUILD adds -fno-trapping-math so the reference loops vectorize
// (it lets the compiler evaluate both sides of a select; no result changes). Sanitizer builds are ~10x
// slower, so there the 2^32 sweeps visit a regular sample and say so.
#include <doctest/doctest.h>
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <thread>
#include <vector>

#include "tensor/half.h"
#include "tests/sanitized_build.h"
#include "tests/skip.h"

namespace {

constexpr uint32_t kBlock = 4096;  // patterns converted per call
constexpr uint64_t kBlocks = (1ull << 32) / kBlock;
// In a sanitized build, a sample: every 16th block, each exponent still seen 128 times.
constexpr uint64_t kBlockStride = gpt::test::kSanitizedBuild ? 16 : 1;

struct SweepResult {
  uint64_t checked = 0;
  uint64_t mismatches = 0;
  uint32_t first_input = 0;
  uint16_t first_got = 0;
  uint16_t first_want = 0;
};

// Converts every (or, sanitized, every kBlockStride-th) block of fp32 patterns with `ours` and `reference`,
// and counts bit differences. Two threads, one per core, each owning alternate blocks.
template <typename Ours, typename Reference>
SweepResult sweep_all_f32(Ours ours, Reference reference) {
  const unsigned threads = 2;
  std::vector<SweepResult> results(threads);
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      alignas(64) float in[kBlock];
      alignas(64) uint16_t got[kBlock];
      alignas(64) uint16_t want[kBlock];
      SweepResult& r = results[t];
      for (uint64_t block = t * kBlockStride; block < kBlocks; block += threads * kBlockStride) {
        const uint32_t base = static_cast<uint32_t>(block * kBlock);
        for (uint32_t i = 0; i < kBlock; ++i) in[i] = gpt::float_of(base + i);
        ours(in, got);
        reference(in, want);
        uint32_t differ = 0;
        for (uint32_t i = 0; i < kBlock; ++i) differ += got[i] != want[i];
        r.checked += kBlock;
        if (differ == 0) continue;
        for (uint32_t i = 0; i < kBlock; ++i) {
          if (got[i] != want[i] && r.mismatches++ == 0) {
            r.first_input = base + i;
            r.first_got = got[i];
            r.first_want = want[i];
          }
        }
      }
    });
  }
  for (auto& w : workers) w.join();
  SweepResult total;
  for (const auto& r : results) {
    total.checked += r.checked;
    if (r.mismatches && !total.mismatches)
      total = {total.checked, 0, r.first_input, r.first_got, r.first_want};
    total.mismatches += r.mismatches;
  }
  return total;
}

void report(const char* what, const SweepResult& r, double seconds) {
  std::printf("%s: %llu patterns in %.2f s%s, %llu mismatches\n", what,
              static_cast<unsigned long long>(r.checked), seconds,
              kBlockStride > 1 ? " (sanitizer build: a 1/16 sample, not all 2^32)" : "",
              static_cast<unsigned long long>(r.mismatches));
  if (r.mismatches) {
    std::printf("  first: input 0x%08x gave 0x%04x, expected 0x%04x\n", r.first_input, r.first_got,
                r.first_want);
  }
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// fp32 -> bf16 by its definition: of the two bf16 values around x, the nearer one, ties to the one with an
// even last bit; measured with exact double subtractions instead of bit carries. Written with selects rather
// than early returns so the sweep's loop vectorizes.
uint16_t reference_f32_to_bf16(float x) {
  const uint32_t bits = gpt::bits_of(x);
  const uint16_t toward_zero = static_cast<uint16_t>(bits >> 16);  // truncation keeps the sign
  const uint16_t away = static_cast<uint16_t>(toward_zero + 1);    // next magnitude up (0x7f80 is infinity)
  const uint32_t low_magnitude = bits & 0x7fff0000u;
  const uint32_t high_magnitude = low_magnitude + 0x10000u;
  // Past the largest finite bf16, rounding sees the value an unbounded exponent would have: 2^128.
  const double high = high_magnitude == 0x7f800000u ? 0x1p128 : gpt::float_of(high_magnitude);
  const double low = gpt::float_of(low_magnitude);
  const double ax = std::fabs(static_cast<double>(x));
  const double below = ax - low;
  const double above = high - ax;
  const uint16_t even = (toward_zero & 1) ? away : toward_zero;
  const uint16_t nearest = below < above ? toward_zero : above < below ? away : even;
  const uint16_t quiet_nan = static_cast<uint16_t>((bits >> 16) | 0x40);  // sign and top payload kept
  const uint32_t magnitude = bits & 0x7fffffffu;
  return magnitude > 0x7f800000u ? quiet_nan : magnitude == 0x7f800000u ? toward_zero : nearest;
}

}  // namespace

#if defined(__F16C__)
TEST_CASE("fp32 -> fp16 matches F16C on every fp32 bit pattern") {
  auto start = std::chrono::steady_clock::now();
  // The scalar function, not the bulk one: bulk fp16 uses F16C itself where present (half_test checks it
  // against the scalar function).
  SweepResult r = sweep_all_f32(
      [](const float* in, uint16_t* out) {
        for (uint32_t i = 0; i < kBlock; ++i) out[i] = gpt::f32_to_f16(in[i]);
      },
      [](const float* in, uint16_t* out) {
        for (uint32_t i = 0; i < kBlock; i += 8) {
          __m128i h = _mm256_cvtps_ph(_mm256_load_ps(in + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
          _mm_store_si128(reinterpret_cast<__m128i*>(out + i), h);
        }
      });
  report("fp32 -> fp16 vs F16C", r, seconds_since(start));
  CHECK(r.mismatches == 0);
  CHECK(r.checked == kBlocks / kBlockStride * kBlock);
}

TEST_CASE("fp16 -> fp32 matches F16C on all 65,536 patterns") {
  int mismatches = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    const float ours = gpt::f16_to_f32(static_cast<uint16_t>(h));
    const float want = _cvtsh_ss(static_cast<unsigned short>(h));
    if (gpt::bits_of(ours) != gpt::bits_of(want) && mismatches++ < 5) {
      std::printf("fp16 0x%04x: got 0x%08x, F16C gives 0x%08x\n", h, gpt::bits_of(ours), gpt::bits_of(want));
    }
  }
  CHECK(mismatches == 0);
}
#else
TEST_CASE("fp16 conversions against F16C") {
  gpt::testing::skipped("fp16 vs F16C: this build targets a CPU without F16C (-march=native lacks it)");
}
#endif

TEST_CASE("fp32 -> bf16 matches a nearest-value reference on every fp32 bit pattern") {
  auto start = std::chrono::steady_clock::now();
  SweepResult r = sweep_all_f32(
      [](const float* in, uint16_t* out) {
        for (uint32_t i = 0; i < kBlock; ++i) out[i] = gpt::f32_to_bf16(in[i]);
      },
      [](const float* in, uint16_t* out) {
        for (uint32_t i = 0; i < kBlock; ++i) out[i] = reference_f32_to_bf16(in[i]);
      });
  report("fp32 -> bf16 vs reference", r, seconds_since(start));
  CHECK(r.mismatches == 0);
}

TEST_CASE("bf16 -> fp32 matches the value its fields encode, on all 65,536 patterns") {
  int mismatches = 0;
  for (uint32_t b = 0; b < 65536; ++b) {
    const float ours = gpt::bf16_to_f32(static_cast<uint16_t>(b));
    const bool negative = b & 0x8000;
    const int exponent = (b >> 7) & 0xff;
    const int mantissa = b & 0x7f;
    bool ok;
    if (exponent == 0xff && mantissa != 0) {  // NaN: quiet, same sign, payload kept above the quiet bit
      const uint32_t bits = gpt::bits_of(ours);
      ok = std::isnan(ours) && std::signbit(ours) == negative && (bits & 0x00400000) &&
           ((bits >> 16) & 0x3f) == (b & 0x3f);
    } else {
      double magnitude = exponent == 0xff ? INFINITY
                         : exponent == 0  ? std::ldexp(mantissa / 128.0, -126)
                                          : std::ldexp(1.0 + mantissa / 128.0, exponent - 127);
      const double want = negative ? -magnitude : magnitude;
      ok = static_cast<double>(ours) == want && std::signbit(ours) == negative;
    }
    if (!ok && mismatches++ < 5) std::printf("bf16 0x%04x: got %a (0x%08x)\n", b, ours, gpt::bits_of(ours));
  }
  CHECK(mismatches == 0);
}
