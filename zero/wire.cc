// Wire conversions; see wire.h.
#include "zero/wire.h"

#include <algorithm>
#include <cstring>

#include "tensor/half.h"

namespace gpt {

DType wire_dtype(Precision precision) {
  switch (precision) {
    case Precision::kFp16:
      return DType::kF16;
    case Precision::kBf16:
      return DType::kBF16;
    case Precision::kFp32:
      break;
  }
  return DType::kF32;
}

size_t wire_bytes(Precision precision) {
  return dtype_size(wire_dtype(precision));
}

void to_wire(Precision precision, const float* src, void* dst, int64_t n, float factor) {
  if (precision == Precision::kFp32) {
    float* out = static_cast<float*>(dst);
    if (factor == 1.0f) {
      std::memcpy(out, src, size_t(n) * sizeof(float));
    } else {
      for (int64_t i = 0; i < n; ++i) out[i] = src[i] * factor;
    }
    return;
  }
  uint16_t* out = static_cast<uint16_t*>(dst);
  // Scale a cache-sized piece at a time, then narrow it with the bulk (vectorized) conversion.
  constexpr int64_t kPiece = 4096;
  float scaled[kPiece];
  for (int64_t begin = 0; begin < n; begin += kPiece) {
    const int64_t len = std::min(kPiece, n - begin);
    const float* piece = src + begin;
    if (factor != 1.0f) {
      for (int64_t i = 0; i < len; ++i) scaled[i] = src[begin + i] * factor;
      piece = scaled;
    }
    if (precision == Precision::kFp16)
      f32_to_f16(piece, out + begin, len);
    else
      f32_to_bf16(piece, out + begin, len);
  }
}

void from_wire(Precision precision, const void* src, float* dst, int64_t n) {
  switch (precision) {
    case Precision::kFp16:
      f16_to_f32(static_cast<const uint16_t*>(src), dst, n);
      break;
    case Precision::kBf16:
      bf16_to_f32(static_cast<const uint16_t*>(src), dst, n);
      break;
    case Precision::kFp32:
      std::memcpy(dst, src, size_t(n) * sizeof(float));
      break;
  }
}

}  // namespace gpt
