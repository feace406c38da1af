// CudaOps' block quantizers against CpuOps, byte for byte: quantize (int8 and int4, from fp32, fp16 and
// bf16), quantize_with_feedback over several steps (wire bytes, kept errors and the finite flag),
// dequantize (rounded through fp32, fp16 and bf16) and dequantize_add. Inputs mix random values with every
// edge the scheme has (zero blocks, subnormals and subnormal scales, FLT_MAX, inf, NaN), on slice lengths
// that are odd or shorter than a block, in device memory and in wire memory, aligned and misaligned. Without
// a device it prints a SKIPPED: line and passes.
#include <doctest/doctest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/quant/quantize.h"
#include "tensor/half.h"
#include "tests/kernels_cuda/backends.h"

namespace {

using gpt::DType;
using gpt::Tensor;
using gpt::testing::Backends;
using gpt::testing::have_device;

// Magnitudes that reach each edge of the scheme in a storage type's range.
struct Range {
  float subnormal;  // values around here are subnormal
  float tiny;       // a block of these has a subnormal scale a few units large (the round-up rule)
  float huge;       // large, finite
  float max;        // the largest finite value (int8 of it needs the lowered scale)
};

Range range_of(DType dtype) {
  if (dtype == DType::kF16) return {1e-6f, 2e-7f, 3e4f, 65504.0f};
  return {1e-39f, 3e-44f, 1e30f, FLT_MAX};
}

float regime_value(int regime, float z, const Range& r, std::mt19937& gen) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  switch (regime) {
    case 0:
      return 0.0f;
    case 1:
      return z * 1e-3f;
    case 2:
      return z * r.huge;
    case 3:
      return z * r.subnormal;
    case 4:
      return z * r.tiny;
    case 5:
      return gen() % 4 == 0 ? (gen() % 2 ? r.max : -r.max) : z * r.max / 8;
    case 6:
      return gen() % 64 == 0 ? (gen() % 2 ? inf : -inf) : z;
    case 7:
      return gen() % 64 == 0 ? nan : z;
    case 8:
      return std::round(z * 16.0f) / 2.0f;  // halves: ties in the rounding of x / s
    case 9:
      return gen() % 2 ? -0.0f : std::numeric_limits<float>::denorm_min();
    default:
      return z;
  }
}

// Runs of 1..300 values share a regime, so blocks hold one regime whole, several mixed, or a cut one.
std::vector<float> edgy_values(size_t n, uint32_t seed, DType dtype = DType::kF32) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const Range range = range_of(dtype);
  std::vector<float> v(n);
  for (size_t i = 0; i < n;) {
    const size_t run = std::min<size_t>(n - i, 1 + gen() % 300);
    const int regime = static_cast<int>(gen() % 12);
    for (size_t k = i; k < i + run; ++k) v[k] = regime_value(regime, normal(gen), range, gen);
    i += run;
  }
  return v;
}

// The bytes of values stored as dtype.
std::vector<uint8_t> stored(const std::vector<float>& values, DType dtype) {
  std::vector<uint8_t> bytes(gpt::dtype_bytes(dtype, int64_t(values.size())));
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::kF32) {
      std::memcpy(bytes.data() + 4 * i, &values[i], 4);
    } else {
      const uint16_t h = dtype == DType::kF16 ? gpt::f32_to_f16(values[i]) : gpt::f32_to_bf16(values[i]);
      std::memcpy(bytes.data() + 2 * i, &h, 2);
    }
  }
  return bytes;
}

// Where a GPU tensor lives, and how many elements past an aligned start (1 makes every vector path fall
// back to scalar code).
struct Where {
  bool wire = false;
  int64_t offset = 0;
};

struct Pair {
  Tensor cpu, gpu;
};

// Both backends, and arenas over host, device and wire memory. The arenas are members after the backends,
// so they give their blocks back before CudaOps (which owns the device and wire sources) goes.
class Fixture {
 public:
  Pair make(DType dtype, int64_t n, const std::vector<uint8_t>& bytes, Where where) {
    Pair p{place(cpu_arena_, dtype, n, where.offset),
           place(where.wire ? wire_arena_ : device_arena_, dtype, n, where.offset)};
    b.cpu.upload(p.cpu, bytes.data());
    b.gpu.upload(p.gpu, bytes.data());
    return p;
  }
  Pair zeros(DType dtype, int64_t n, Where where) { return filled(dtype, n, 0, where); }
  // Outputs start as junk, so a byte the GPU never writes cannot pass for one the CPU wrote.
  Pair filled(DType dtype, int64_t n, uint8_t byte, Where where) {
    return make(dtype, n, std::vector<uint8_t>(gpt::dtype_bytes(dtype, n), byte), where);
  }
  std::vector<uint8_t> bytes(gpt::Ops& ops, const Tensor& t) {
    std::vector<uint8_t> out(t.nbytes());
    ops.download(out.data(), t);
    return out;
  }
  // CHECKs that the two tensors of p hold the same bytes, naming the first difference.
  void check_same(const Pair& p, const std::string& what) {
    const std::vector<uint8_t> cpu = bytes(b.cpu, p.cpu), gpu = bytes(b.gpu, p.gpu);
    const auto diff = std::mismatch(cpu.begin(), cpu.end(), gpu.begin());
    INFO(what << ": first differing byte " << (diff.first - cpu.begin()) << " of " << cpu.size());
    CHECK(diff.first == cpu.end());
  }

  Backends b;

 private:
  Tensor place(gpt::Arena& arena, DType dtype, int64_t n, int64_t offset) {
    const size_t skip = gpt::dtype_bytes(dtype, offset);
    auto* block = static_cast<uint8_t*>(arena.allocate("t", "test", gpt::dtype_bytes(dtype, n) + skip));
    return Tensor{block + skip, {n}, dtype, arena.device()};
  }

  gpt::Arena cpu_arena_;
  gpt::Arena device_arena_{"cuda", gpt::Arena::kUnlimited, &b.gpu.device_memory()};
  gpt::Arena wire_arena_{"wire", gpt::Arena::kUnlimited, &b.gpu.wire_memory()};
};

struct Shape {
  int64_t slice_len, count;
  int block;
};

// Odd lengths, blocks longer than a slice, one-warp and whole-thread-block teams, many groups per thread.
const Shape kShapes[] = {{1001, 3, 256},  {4099, 2, 512}, {2048 * 3 + 5, 2, 2048}, {7, 5, 8}, {300, 4, 4096},
                         {65549, 1, 256}, {33, 7, 16},    {5000, 3, 1000}};

std::string describe(const Shape& s, int bits) {
  return std::to_string(s.count) + " x " + std::to_string(s.slice_len) + ", block " +
         std::to_string(s.block) + ", int" + std::to_string(bits);
}

size_t wire_bytes(const Shape& s, int bits) {
  return size_t(s.count) * gpt::quant::quantized_bytes(s.slice_len, bits, s.block);
}

}  // namespace

TEST_CASE("CudaOps::quantize writes CpuOps' bytes from fp32, fp16 and bf16") {
  if (!have_device()) return;
  Fixture f;
  int case_index = 0, nonfinite_cases = 0, finite_cases = 0;
  for (const Shape& s : kShapes) {
    for (int bits : {8, 4}) {
      for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
        const int64_t n = s.slice_len * s.count;
        const bool edgy = case_index % 4 != 3;  // every fourth case all finite
        const std::vector<float> values = edgy ? edgy_values(size_t(n), 100 + case_index, dtype)
                                               : gpt::testing::random_values(size_t(n), 7);
        const Where x_at{case_index % 2 == 1, case_index % 3 == 2},
            out_at{case_index % 3 == 1, case_index % 5 == 4};
        ++case_index;
        const Pair x = f.make(dtype, n, stored(values, dtype), x_at);
        const Pair out = f.filled(DType::kI8, int64_t(wire_bytes(s, bits)), 0xab, out_at);
        const bool cpu_finite = f.b.cpu.quantize(out.cpu, x.cpu, s.slice_len, s.count, bits, s.block);
        const bool gpu_finite = f.b.gpu.quantize(out.gpu, x.gpu, s.slice_len, s.count, bits, s.block);
        INFO(describe(s, bits) << " from " << gpt::dtype_name(dtype));
        CHECK(cpu_finite == gpu_finite);
        f.check_same(out, "wire bytes");
        (cpu_finite ? finite_cases : nonfinite_cases)++;
      }
    }
  }
  CHECK(finite_cases > 0);  // both outcomes were exercised
  CHECK(nonfinite_cases > 0);
}

TEST_CASE("CudaOps::dequantize and dequantize_add give CpuOps' fp32 bits") {
  if (!have_device()) return;
  Fixture f;
  int case_index = 0;
  for (const Shape& s : kShapes) {
    for (int bits : {8, 4}) {
      const int64_t n = s.slice_len * s.count;
      const std::vector<float> values = edgy_values(size_t(n), 200 + case_index);
      const Where in_at{case_index % 2 == 0, case_index % 3 == 1},
          out_at{case_index % 3 == 2, case_index % 4 == 1};
      ++case_index;
      // The wire bytes to invert: the CPU's quantization of edge values (NaN scales included).
      const Pair x = f.make(DType::kF32, n, stored(values, DType::kF32), Where{});
      const Pair in = f.zeros(DType::kI8, int64_t(wire_bytes(s, bits)), in_at);
      f.b.cpu.quantize(in.cpu, x.cpu, s.slice_len, s.count, bits, s.block);
      f.b.gpu.upload(in.gpu, f.bytes(f.b.cpu, in.cpu).data());
      INFO(describe(s, bits));
      for (DType round_to : {DType::kF32, DType::kF16, DType::kBF16}) {
        const Pair out = f.filled(DType::kF32, n, 0x5c, out_at);
        f.b.cpu.dequantize(out.cpu, in.cpu, s.slice_len, s.count, bits, s.block, round_to);
        f.b.gpu.dequantize(out.gpu, in.gpu, s.slice_len, s.count, bits, s.block, round_to);
        f.check_same(out, std::string("dequantized, rounded to ") + gpt::dtype_name(round_to));
      }
      // Sums into finite accumulators, twice (the second adds into the first's results).
      const Pair acc =
          f.make(DType::kF32, n, stored(gpt::testing::random_values(size_t(n), 9), DType::kF32), out_at);
      for (int round = 0; round < 2; ++round) {
        f.b.cpu.dequantize_add(acc.cpu, in.cpu, s.slice_len, s.count, bits, s.block);
        f.b.gpu.dequantize_add(acc.gpu, in.gpu, s.slice_len, s.count, bits, s.block);
        f.check_same(acc, "dequantized and added");
      }
    }
  }
}

TEST_CASE("CudaOps::dequantize_add keeps a NaN accumulator's NaN as CpuOps does") {
  if (!have_device()) return;
  Fixture f;
  const Shape s{1000, 2, 256};
  const int64_t n = s.slice_len * s.count;
  const Pair x =
      f.make(DType::kF32, n, stored(gpt::testing::random_values(size_t(n), 3), DType::kF32), Where{});
  const Pair in = f.zeros(DType::kI8, int64_t(wire_bytes(s, 8)), Where{});
  f.b.cpu.quantize(in.cpu, x.cpu, s.slice_len, s.count, 8, s.block);
  f.b.gpu.upload(in.gpu, f.bytes(f.b.cpu, in.cpu).data());
  std::vector<float> acc_values = gpt::testing::random_values(size_t(n), 4);
  for (size_t i = 0; i < acc_values.size(); i += 17) acc_values[i] = std::numeric_limits<float>::quiet_NaN();
  for (size_t i = 5; i < acc_values.size(); i += 31) acc_values[i] = -std::numeric_limits<float>::infinity();
  const Pair acc = f.make(DType::kF32, n, stored(acc_values, DType::kF32), Where{true, 0});
  f.b.cpu.dequantize_add(acc.cpu, in.cpu, s.slice_len, s.count, 8, s.block);
  f.b.gpu.dequantize_add(acc.gpu, in.gpu, s.slice_len, s.count, 8, s.block);
  f.check_same(acc, "NaN and -inf accumulators plus finite blocks");
}

TEST_CASE("CudaOps::quantize_with_feedback keeps CpuOps' wire bytes and errors step after step") {
  if (!have_device()) return;
  Fixture f;
  int case_index = 0;
  for (const Shape& s : kShapes) {
    for (int bits : {4, 8}) {
      for (float beta : {0.0f, 0.5f, 0.9f}) {
        const int64_t n = s.slice_len * s.count;
        const Where x_at{case_index % 2 == 1, case_index % 3 == 0},
            error_at{case_index % 3 == 2, case_index % 2}, out_at{case_index % 4 == 1, case_index % 5 == 2};
        ++case_index;
        INFO(describe(s, bits) << ", beta " << beta);
        // The kept error starts as zeros in one run of steps, and as garbage (int8 quantization of edge
        // values, NaN scales included) in the other.
        for (bool garbage_start : {false, true}) {
          const Pair error = f.zeros(DType::kI8, int64_t(wire_bytes(s, 8)), error_at);
          if (garbage_start) {
            const Pair junk = f.make(DType::kF32, n,
                                     stored(edgy_values(size_t(n), 300 + case_index), DType::kF32), Where{});
            f.b.cpu.quantize(error.cpu, junk.cpu, s.slice_len, s.count, 8, s.block);
            f.b.gpu.upload(error.gpu, f.bytes(f.b.cpu, error.cpu).data());
          }
          const Pair out = f.filled(DType::kI8, int64_t(wire_bytes(s, bits)), 0xab, out_at);
          for (int step = 0; step < 4; ++step) {
            INFO("step " << step << (garbage_start ? " from garbage" : " from zeros"));
            // Steps 0, 1 and 3 are gradients of varying size; step 2 has every edge, non-finite blocks too.
            std::vector<float> values =
                step == 2 ? edgy_values(size_t(n), 400 + case_index)
                          : gpt::testing::random_values(size_t(n), uint32_t(500 + 10 * case_index + step));
            if (step == 1)
              for (float& v : values) v *= 1e-3f;
            const Pair x = f.make(DType::kF32, n, stored(values, DType::kF32), x_at);
            const bool cpu_finite = f.b.cpu.quantize_with_feedback(out.cpu, x.cpu, error.cpu, s.slice_len,
                                                                   s.count, bits, s.block, beta);
            const bool gpu_finite = f.b.gpu.quantize_with_feedback(out.gpu, x.gpu, error.gpu, s.slice_len,
                                                                   s.count, bits, s.block, beta);
            CHECK(cpu_finite == gpu_finite);
            f.check_same(out, "wire bytes");
            f.check_same(error, "kept error");
          }
        }
      }
    }
  }
}

TEST_CASE("CudaOps' quantizers reject what CpuOps rejects, and bad sizes") {
  if (!have_device()) return;
  Fixture f;
  const Pair x = f.zeros(DType::kF32, 1000, Where{});
  const Pair out = f.zeros(DType::kI8, 2000, Where{});
  const Pair error = f.zeros(DType::kI8, 2000, Where{});
  CHECK_THROWS_AS(f.b.gpu.quantize(out.gpu, x.gpu, 1000, 1, 5, 256), std::invalid_argument);
  CHECK_THROWS_AS(f.b.gpu.quantize(out.gpu, x.gpu, 1000, 1, 8, 12), std::invalid_argument);
  CHECK_THROWS_AS(f.b.gpu.quantize(out.gpu, x.gpu, -1, 1, 8, 256), std::invalid_argument);
  CHECK_THROWS_AS(f.b.gpu.quantize(out.gpu, out.gpu, 1000, 1, 8, 256), std::invalid_argument);  // i8 input
  CHECK_THROWS_AS(f.b.gpu.quantize_with_feedback(out.gpu, x.gpu, error.gpu, 1000, 1, 4, 256, 1.0f),
                  std::invalid_argument);
  CHECK_THROWS_AS(f.b.gpu.dequantize(x.gpu, out.gpu, 1000, 1, 8, 256, DType::kI8), std::invalid_argument);
  CHECK_THROWS_AS(f.b.gpu.quantize(out.gpu, x.gpu, 1000, 2, 8, 256), gpt::cuda::CudaError);  // x too short
  const Pair sums = f.zeros(DType::kF32, 2000, Where{});
  CHECK_THROWS_AS(f.b.gpu.dequantize_add(sums.gpu, out.gpu, 1000, 2, 8, 8),
                  gpt::cuda::CudaError);  // in too short
  // Nothing to do is fine, and finite.
  CHECK(f.b.gpu.quantize(out.gpu, x.gpu, 0, 3, 8, 256));
  CHECK(f.b.gpu.quantize_with_feedback(out.gpu, x.gpu, error.gpu, 1000, 0, 4, 256, 0.5f));
  f.b.gpu.dequantize(x.gpu, out.gpu, 0, 0, 4, 256, DType::kF32);
  f.b.gpu.synchronize();
}
