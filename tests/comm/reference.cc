// References for the comm tests (see reference.h).
#include "tests/comm/reference.h"

#include <cmath>
#include <cstring>

#include "tensor/half.h"

namespace gpt::comm::testing {
namespace {

uint64_t mix(uint64_t x) {  // splitmix64's finalizer: a well-spread hash of the index
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

uint8_t pattern_byte(int rank, size_t index, int seed) {
  return static_cast<uint8_t>(mix((uint64_t(seed) << 48) ^ (uint64_t(rank) << 40) ^ index));
}

std::vector<uint8_t> pattern(int rank, size_t bytes, int seed) {
  std::vector<uint8_t> out(bytes);
  for (size_t i = 0; i < bytes; ++i) out[i] = pattern_byte(rank, i, seed);
  return out;
}

float round_to(float value, DType dtype) {
  switch (dtype) {
    case DType::kF16:
      return round_to_f16(value);
    case DType::kBF16:
      return round_to_bf16(value);
    default:
      return value;
  }
}

float input_value(int rank, size_t i, DType dtype, int seed) {
  const uint64_t h = mix((uint64_t(seed) << 48) ^ (uint64_t(rank) << 40) ^ i);
  const double unit = double(h >> 11) * 0x1.0p-53;  // [0, 1)
  const int binade = int((h >> 3) % 8) - 4;         // 2^-4 .. 2^3
  const double sign = (h & 1) ? -1.0 : 1.0;
  return round_to(float(sign * (1.0 + unit) * std::ldexp(1.0, binade)), dtype);
}

std::vector<uint8_t> encode(const std::vector<float>& values, DType dtype) {
  std::vector<uint8_t> out(values.size() * dtype_size(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::kF32) {
      std::memcpy(out.data() + 4 * i, &values[i], 4);
    } else {
      const uint16_t bits = dtype == DType::kF16 ? f32_to_f16(values[i]) : f32_to_bf16(values[i]);
      std::memcpy(out.data() + 2 * i, &bits, 2);
    }
  }
  return out;
}

float decode(const void* wire, size_t i, DType dtype) {
  const auto* bytes = static_cast<const uint8_t*>(wire);
  if (dtype == DType::kF32) {
    float value;
    std::memcpy(&value, bytes + 4 * i, 4);
    return value;
  }
  uint16_t bits;
  std::memcpy(&bits, bytes + 2 * i, 2);
  return dtype == DType::kF16 ? f16_to_f32(bits) : bf16_to_f32(bits);
}

double unit_roundoff(DType dtype) {
  switch (dtype) {
    case DType::kF16:
      return 0x1.0p-11;
    case DType::kBF16:
      return 0x1.0p-8;
    default:
      return 0x1.0p-24;
  }
}

float ring_sum(int ranks, int chunk, size_t global_index, DType dtype, int seed, float scale) {
  if (ranks == 1) return input_value(0, global_index, dtype, seed) * scale;
  float partial = input_value((chunk + 1) % ranks, global_index, dtype, seed);
  for (int k = 2; k < ranks; ++k) {
    partial = round_to(partial + input_value((chunk + k) % ranks, global_index, dtype, seed), dtype);
  }
  return (partial + input_value(chunk, global_index, dtype, seed)) * scale;
}

double exact_sum(int ranks, size_t global_index, DType dtype, int seed, double* magnitude) {
  double sum = 0, size = 0;
  for (int r = 0; r < ranks; ++r) {
    const double x = input_value(r, global_index, dtype, seed);
    sum += x;
    size += std::fabs(x);
  }
  if (magnitude) *magnitude = size;
  return sum;
}

double ring_error_bound(int ranks, DType dtype, double magnitude, double scale) {
  const double u = unit_roundoff(dtype), u32 = 0x1.0p-24;
  const double tiny = dtype == DType::kF16 ? 0x1.0p-25 : 0.0;  // absolute error of an fp16 subnormal rounding
  const int roundings = ranks > 2 ? ranks - 2 : 0;
  const double before_scale = roundings * (u * magnitude + tiny) + (ranks - 1) * u32 * magnitude;
  return 1.01 * (std::fabs(scale) * before_scale + u32 * std::fabs(scale) * magnitude);
}

}  // namespace gpt::comm::testing
