// Bulk fp32 <-> fp16/bf16 conversions over arrays, the CPU backend's path for whole weight arrays.
//
// bf16 loops apply the scalar bit logic of half.h, which is branch-free and compiles to SIMD code at -O3 with
// -march=native. For fp16 the same logic vectorizes too but runs about 4x slower than the F16C conversion
// instructions, so where the target has F16C the bulk fp16 loops use them; the exhaustive tests prove the
// scalar functions bit-identical to F16C on every input (NaNs included), and half_test checks the bulk
// functions against the scalar ones. F16C's rounding here comes from the instruction's immediate, not from
// MXCSR, and fp32 subnormal inputs round to a signed zero either way, so DAZ/FTZ settings cannot change it.
#include "tensor/half.h"

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace gpt {

void f32_to_f16(const float* in, uint16_t* out, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
#endif
  for (; i < n; ++i) out[i] = f32_to_f16(in[i]);
}

void f16_to_f32(const uint16_t* in, float* out, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
  }
#endif
  for (; i < n; ++i) out[i] = f16_to_f32(in[i]);
}

void round_to_f16(const float* in, float* out, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
#endif
  for (; i < n; ++i) out[i] = round_to_f16(in[i]);
}

void f32_to_bf16(const float* in, uint16_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = f32_to_bf16(in[i]);
}

void bf16_to_f32(const uint16_t* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(in[i]);
}

void round_to_bf16(const float* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = round_to_bf16(in[i]);
}

}  // namespace gpt
