// fp32 accumulation over wire dtypes, written once per dtype through small converter types so that the loops
// are plain and vectorize (the tensor room's scalar conversions are branch-free bit logic).
#include "comm/wire_reduce.h"

#include <cstdint>
#include <cstring>
#include <stdexcept>

#include "tensor/half.h"

namespace gpt::comm {
namespace {

struct F32Wire {
  using Bits = float;
  static float widen(float x) { return x; }
  static float narrow(float x) { return x; }
};
struct F16Wire {
  using Bits = uint16_t;
  static float widen(uint16_t x) { return f16_to_f32(x); }
  static uint16_t narrow(float x) { return f32_to_f16(x); }
};
struct BF16Wire {
  using Bits = uint16_t;
  static float widen(uint16_t x) { return bf16_to_f32(x); }
  static uint16_t narrow(float x) { return f32_to_bf16(x); }
};

// Calls body.template operator()<Wire>() for the wire type of dtype.
template <typename Body>
void dispatch(DType dtype, Body&& body) {
  switch (dtype) {
    case DType::kF32:
      return body.template operator()<F32Wire>();
    case DType::kF16:
      return body.template operator()<F16Wire>();
    case DType::kBF16:
      return body.template operator()<BF16Wire>();
    default:
      throw std::invalid_argument(std::string("reductions travel in f32, f16 or bf16, not ") +
                                  dtype_name(dtype));
  }
}

}  // namespace

bool is_reducible(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16;
}

void add_to_wire(const void* partial, const void* own, void* out, DType dtype, size_t n) {
  dispatch(dtype, [&]<typename W>() {
    const auto* a = static_cast<const typename W::Bits*>(partial);
    const auto* b = static_cast<const typename W::Bits*>(own);
    auto* c = static_cast<typename W::Bits*>(out);
    for (size_t i = 0; i < n; ++i) c[i] = W::narrow(W::widen(a[i]) + W::widen(b[i]));
  });
}

void add_final(const void* partial, const void* own, float* out, float scale, DType dtype, size_t n) {
  dispatch(dtype, [&]<typename W>() {
    const auto* a = static_cast<const typename W::Bits*>(partial);
    const auto* b = static_cast<const typename W::Bits*>(own);
    for (size_t i = 0; i < n; ++i) out[i] = (W::widen(a[i]) + W::widen(b[i])) * scale;
  });
}

void widen_scaled(const void* in, float* out, float scale, DType dtype, size_t n) {
  dispatch(dtype, [&]<typename W>() {
    const auto* a = static_cast<const typename W::Bits*>(in);
    for (size_t i = 0; i < n; ++i) out[i] = W::widen(a[i]) * scale;
  });
}

void narrow_to_wire(const float* in, void* out, DType dtype, size_t n) {
  dispatch(dtype, [&]<typename W>() {
    auto* c = static_cast<typename W::Bits*>(out);
    for (size_t i = 0; i < n; ++i) c[i] = W::narrow(in[i]);
  });
}

}  // namespace gpt::comm
