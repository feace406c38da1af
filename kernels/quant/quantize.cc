// Bulk block quantizers on the CPU (see quantize.h for the wire format, quantize_block.h for the math).
//
// Each block is one task: an integer max over its magnitudes (its absmax and non-finite flag at once), its
// scale, then one pass that quantizes (or dequantizes) it. A block of up to 4096 fp32 values stays in L1
// between the two passes. Blocks are independent, so OpenMP splits the flat list of (slice, block) pairs and
// the bytes cannot depend on the thread count. This file is compiled with -ffp-contract=off (see BUILD).
//
// The passes that dominate a ZeRO++ step's codec time have AVX-512 bodies (scalar tails, and plain loops on
// CPUs without it): the codes of a finite block (qgZ's int4 gradients, qwZ's int8 weights), int8 codes
// decoded straight onto the fp16 grid (qwZ's gathered weights) and int4 codes decoded or added (qgZ's hops).
// Each instruction is the IEEE operation the scalar functions of quantize_block.h name (a true division,
// round-half-even, one rounding per product, the F16C conversion that round_to_f16 uses), so the bytes equal
// theirs; tests/quant holds both to the same float64 reference. Measured on one core here (4M values): int4
// codes 3.7 -> 6.5 G values/s, int8 decode to fp16 5.4 -> 11.3 G values/s. Inside a ZeRO++ step on the CPU
// the decode gains less: its fp32 output, two full models a rank a step, is bound by memory writes
// (bench/results/README.md, cpu_profile_codecs).
#include "kernels/quant/quantize.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/quant/quantize_block.h"
#include "tensor/half.h"

namespace gpt::quant {
namespace {

// Below this many values a call runs on the calling thread: waking the team would cost more than the work.
constexpr int64_t kParallelMinValues = int64_t{1} << 16;

void check_arguments(const char* function, int64_t slice_len, int64_t count, int bits, int64_t block) {
  std::string problem;
  if (bits != 4 && bits != 8) problem = "bits is " + std::to_string(bits) + "; it must be 4 or 8";
  if (!valid_block_size(block))
    problem = "block size is " + std::to_string(block) + "; it must be a positive multiple of 8";
  if (slice_len < 0 || count < 0)
    problem = "negative length (" + std::to_string(slice_len) + " x " + std::to_string(count) + ")";
  if (!problem.empty()) throw std::invalid_argument(std::string("gpt::quant::") + function + ": " + problem);
}

// Input readers: `len` values of a slice from `offset`, widened exactly to fp32. fp16 and bf16 blocks are
// widened into a scratch block first by the bulk conversions of tensor/half.h (F16C for fp16 where the CPU
// has it, bit-identical to the scalar functions), which run about 10x faster than widening value by value
// inside the quantizer's loops.
struct ReadF32 {
  static constexpr bool kWidens = false;
  const float* p;
  const float* widen(int64_t offset, int64_t, float*) const { return p + offset; }
};
struct ReadF16 {
  static constexpr bool kWidens = true;
  const uint16_t* p;
  const float* widen(int64_t offset, int64_t len, float* scratch) const {
    f16_to_f32(p + offset, scratch, len);
    return scratch;
  }
};
struct ReadBF16 {
  static constexpr bool kWidens = true;
  const uint16_t* p;
  const float* widen(int64_t offset, int64_t len, float* scratch) const {
    bf16_to_f32(p + offset, scratch, len);
    return scratch;
  }
};

// Output writers: what becomes of dequantized value i; finish(len) runs once the block's values are written
// (rounding them to the compute dtype in bulk, as the readers widen).
struct WriteF32 {
  float* p;
  void operator()(int64_t i, float v) const { p[i] = v; }
  void finish(int64_t) const {}
  WriteF32 at(int64_t offset) const { return {p + offset}; }
};
struct WriteRoundedF16 {
  float* p;
  void operator()(int64_t i, float v) const { p[i] = v; }
  void finish(int64_t len) const { round_to_f16(p, p, len); }
  WriteRoundedF16 at(int64_t offset) const { return {p + offset}; }
};
struct WriteRoundedBF16 {
  float* p;
  void operator()(int64_t i, float v) const { p[i] = v; }
  void finish(int64_t len) const { round_to_bf16(p, p, len); }
  WriteRoundedBF16 at(int64_t offset) const { return {p + offset}; }
};
struct AddF32 {
  float* p;
  void operator()(int64_t i, float v) const { p[i] += v; }  // two roundings: contraction is off here
  void finish(int64_t) const {}
  AddF32 at(int64_t offset) const { return {p + offset}; }
};

// quantize_value for a value of a finite block, as a float: x / scale is then finite, so quantize_value's NaN
// guard changes nothing, and without it and the integer conversion the loops that use this vectorize.
inline float finite_code(float x, float scale, float qmax_f) {
  float r = std::nearbyint(x / scale);
  r = r > qmax_f ? qmax_f : r;
  return r < -qmax_f ? -qmax_f : r;
}

#if defined(__AVX512F__)
// finite_code of 16 values: a division, round-half-even, the clamp, an exact conversion.
inline __m512i finite_codes16(const float* x, __m512 scale, __m512 qmax) {
  const __m512 q = _mm512_div_ps(_mm512_loadu_ps(x), scale);
  const __m512 r = _mm512_roundscale_ps(q, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  return _mm512_cvtps_epi32(_mm512_max_ps(_mm512_min_ps(r, qmax), _mm512_sub_ps(_mm512_setzero_ps(), qmax)));
}

// 16 int32 codes as 8 bytes of int4 pairs: each 64-bit lane holds element 2k in its low half and 2k + 1 in
// its high half, so (lane & 0xf) | ((lane >> 28) & 0xf0) is pack_int4's byte.
inline __m128i pack_int4_16(__m512i codes) {
  const __m512i low = _mm512_and_si512(codes, _mm512_set1_epi64(0xf));
  const __m512i high = _mm512_and_si512(_mm512_srli_epi64(codes, 28), _mm512_set1_epi64(0xf0));
  return _mm512_cvtepi64_epi8(_mm512_or_si512(low, high));
}
#endif

// The codes of a finite block with its scale: bytes for int8, pairs of nibbles for int4 (quantize_block.h).
template <int kBits>
void codes_of_finite_block(const float* x, int64_t len, float scale, uint8_t* codes) {
  const float qmax_f = static_cast<float>(qmax_of(kBits));
  int64_t i = 0;
#if defined(__AVX512F__)
  const __m512 scale16 = _mm512_set1_ps(scale), qmax16 = _mm512_set1_ps(qmax_f);
  if constexpr (kBits == 8) {
    for (; i + 16 <= len; i += 16) {
      const __m128i bytes = _mm512_cvtepi32_epi8(finite_codes16(x + i, scale16, qmax16));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + i), bytes);
    }
  } else {
    for (; i + 32 <= len; i += 32) {
      const __m128i first = pack_int4_16(finite_codes16(x + i, scale16, qmax16));
      const __m128i second = pack_int4_16(finite_codes16(x + i + 16, scale16, qmax16));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + i / 2), _mm_unpacklo_epi64(first, second));
    }
  }
#endif
  auto code = [&](int64_t k) { return static_cast<int>(finite_code(x[k], scale, qmax_f)); };
  if constexpr (kBits == 8) {
    for (; i < len; ++i) codes[i] = static_cast<uint8_t>(code(i));
  } else {
    for (; i + 1 < len; i += 2) codes[i / 2] = pack_int4(code(i), code(i + 1));
    if (i < len) codes[i / 2] = pack_int4(code(i), 0);
  }
}

#if defined(__AVX512F__)
// int8 codes times their scale, rounded to fp16 and widened back (what WriteRoundedF16 gives), 16 at a time:
// one pass instead of a store of the products and a second pass that rounds them.
void int8_to_f16_grid16(const uint8_t* codes, __m512 scale, float* out) {
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes));
  const __m512 value = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(bytes)), scale);
  const __m256i half = _mm512_cvtps_ph(value, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  _mm512_storeu_ps(out, _mm512_cvtph_ps(half));
}

// 16 values of int4 codes (8 bytes) times their scale. One byte per 64-bit lane: its low nibble to the
// lane's low half (element 2k), its high nibble to the high half (2k + 1), each sign-extended as (n ^ 8) - 8.
__m512 int4_values16(const uint8_t* codes, __m512 scale) {
  const __m512i nibble = _mm512_set1_epi64(0xf), eight = _mm512_set1_epi32(8);
  const __m512i bytes = _mm512_cvtepu8_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes)));
  const __m512i high = _mm512_slli_epi64(_mm512_and_si512(_mm512_srli_epi64(bytes, 4), nibble), 32);
  const __m512i pairs = _mm512_or_si512(_mm512_and_si512(bytes, nibble), high);
  return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_xor_si512(pairs, eight), eight)), scale);
}
#endif

// The vector part of a block's decode, for the writers that dominate a ZeRO++ step (qwZ's weights onto the
// fp16 grid, qgZ's int4 hops stored or added, two roundings): the values [0, n) it wrote, n a multiple of 16
// (0 without AVX-512, or for other writers). dequantize_block does the rest.
template <int kBits, class Write>
int64_t decode_vectors(const uint8_t* codes, float scale, int64_t len, const Write& out) {
  int64_t i = 0;
#if defined(__AVX512F__)
  const __m512 scale16 = _mm512_set1_ps(scale);
  if constexpr (kBits == 8 && std::is_same_v<Write, WriteRoundedF16>) {
    for (; i + 16 <= len; i += 16) int8_to_f16_grid16(codes + i, scale16, out.p + i);
  } else if constexpr (kBits == 4 && std::is_same_v<Write, WriteF32>) {
    for (; i + 16 <= len; i += 16) _mm512_storeu_ps(out.p + i, int4_values16(codes + i / 2, scale16));
  } else if constexpr (kBits == 4 && std::is_same_v<Write, AddF32>) {
    for (; i + 16 <= len; i += 16) {
      const __m512 sum = _mm512_add_ps(_mm512_loadu_ps(out.p + i), int4_values16(codes + i / 2, scale16));
      _mm512_storeu_ps(out.p + i, sum);
    }
  }
#endif
  return i;
}

// Quantizes one block of len values; writes its codes and its scale (unaligned). Returns whether it was
// finite.
template <int kBits>
bool quantize_block(const float* x, int64_t len, uint8_t* codes, uint8_t* scale_slot) {
  constexpr int qmax = qmax_of(kBits);
  uint32_t absmax = 0;
  for (int64_t i = 0; i < len; ++i) absmax = std::max(absmax, magnitude_bits(x[i]));
  const float scale = block_scale(absmax, qmax);
  std::memcpy(scale_slot, &scale, sizeof scale);
  if (!block_is_finite(absmax)) {
    std::memset(codes, 0, data_bytes(len, kBits));
    return false;
  }
  codes_of_finite_block<kBits>(x, len, scale, codes);
  return true;
}

template <int kBits, class Write>
void dequantize_block(const uint8_t* codes, float scale, int64_t len, Write out) {
  if constexpr (kBits == 8) {
    for (int64_t i = 0; i < len; ++i) out(i, dequantize_value(static_cast<int8_t>(codes[i]), scale));
  } else {
    const int64_t pairs = len / 2;
    for (int64_t k = 0; k < pairs; ++k) {
      out(2 * k, dequantize_value(unpack_int4_low(codes[k]), scale));
      out(2 * k + 1, dequantize_value(unpack_int4_high(codes[k]), scale));
    }
    if (len % 2 != 0) out(len - 1, dequantize_value(unpack_int4_low(codes[pairs]), scale));
  }
}

// One block of the flat list of (slice, block) pairs that a bulk call walks.
struct BlockAt {
  int64_t slice, index;  // which slice, and which block of it
  int64_t first, len;    // its first value within the slice, and its length (the last one may be short)
};

// Runs f(block, scratch) on every block of `count` slices of slice_len values, split over the OpenMP threads
// (each with scratch_floats floats of scratch), and returns whether every call returned true.
template <class F>
bool for_each_block(int64_t slice_len, int64_t count, int block, size_t scratch_floats, F&& f) {
  const int64_t blocks = block_count(slice_len, block);
  const int64_t total = blocks * count;
  bool all = true;
#pragma omp parallel reduction(&& : all) if (slice_len * count >= kParallelMinValues)
  {
    std::vector<float> scratch(scratch_floats);
#pragma omp for schedule(static)
    for (int64_t g = 0; g < total; ++g) {
      const int64_t slice = g / blocks, b = g % blocks, first = b * block;
      const bool ok =
          f(BlockAt{slice, b, first, std::min<int64_t>(block, slice_len - first)}, scratch.data());
      all = all && ok;
    }
  }
  return all;
}

template <int kBits, class Read>
bool quantize_all(Read x, int64_t slice_len, int64_t count, int block, uint8_t* out) {
  const size_t slice_bytes = quantized_bytes(slice_len, kBits, block);
  const size_t codes_bytes = data_bytes(slice_len, kBits);
  const size_t scratch = Read::kWidens ? size_t(std::min<int64_t>(block, slice_len)) : 0;
  return for_each_block(slice_len, count, block, scratch, [&](const BlockAt& at, float* widened) {
    uint8_t* base = out + static_cast<size_t>(at.slice) * slice_bytes;
    return quantize_block<kBits>(x.widen(at.slice * slice_len + at.first, at.len, widened), at.len,
                                 base + data_bytes(at.first, kBits), base + codes_bytes + 4 * at.index);
  });
}

template <int kBits, class Write>
void dequantize_all(const uint8_t* in, int64_t slice_len, int64_t count, int block, Write out) {
  const size_t slice_bytes = quantized_bytes(slice_len, kBits, block);
  const size_t codes_bytes = data_bytes(slice_len, kBits);
  for_each_block(slice_len, count, block, 0, [&](const BlockAt& at, float*) {
    const uint8_t* base = in + static_cast<size_t>(at.slice) * slice_bytes;
    float scale;
    std::memcpy(&scale, base + codes_bytes + 4 * at.index, sizeof scale);
    const Write block_out = out.at(at.slice * slice_len + at.first);
    const uint8_t* codes = base + data_bytes(at.first, kBits);
    const int64_t done = decode_vectors<kBits>(codes, scale, at.len, block_out);  // even: whole bytes
    const Write rest = block_out.at(done);
    dequantize_block<kBits>(codes + data_bytes(done, kBits), scale, at.len - done, rest);
    rest.finish(at.len - done);
    return true;
  });
}

// One block with error feedback (quantize.h): h = x + kept error goes on the wire as kBits codes, and the
// block's kept error becomes the moving average of what that lost, stored as int8 codes with their own scale.
// scratch holds len floats.
template <int kBits>
bool quantize_block_with_feedback(const float* x, int64_t len, float beta, uint8_t* codes,
                                  uint8_t* scale_slot, uint8_t* kept_codes, uint8_t* kept_scale_slot,
                                  float* scratch) {
  constexpr int qmax = qmax_of(kBits);
  float kept_scale;
  std::memcpy(&kept_scale, kept_scale_slot, sizeof kept_scale);
  auto kept = [&](int64_t i) { return dequantize_value(static_cast<int8_t>(kept_codes[i]), kept_scale); };
  for (int64_t i = 0; i < len; ++i) scratch[i] = compensate(x[i], kept(i));
  if (!quantize_block<kBits>(scratch, len, codes, scale_slot)) {
    std::memset(kept_codes, 0, len);  // an overflow: the step is skipped, nothing worth keeping
    std::memset(kept_scale_slot, 0, sizeof kept_scale);
    return false;
  }
  float scale;
  std::memcpy(&scale, scale_slot, sizeof scale);
  // feedback_error of quantize_block.h, written so that the loops vectorize: this file is compiled with
  // -ffp-contract=off, so plain operators fuse nothing (the header's barriers, which keep that promise under
  // any flags, would keep the loop scalar), and the code is finite_code's float. The tests hold this and the
  // header to the same float64 reference.
  const float qmax_f = static_cast<float>(qmax), one_minus_beta = 1.0f - beta;
  for (int64_t i = 0; i < len; ++i) {
    const float h = scratch[i];
    scratch[i] = h - finite_code(h, scale, qmax_f) * scale;  // what the wire lost
  }
  for (int64_t i = 0; i < len; ++i) scratch[i] = beta * kept(i) + one_minus_beta * scratch[i];
  quantize_block<8>(scratch, len, kept_codes, kept_scale_slot);
  return true;
}

template <int kBits>
bool quantize_all_with_feedback(const float* x, int64_t slice_len, int64_t count, int block, float beta,
                                uint8_t* error, uint8_t* out) {
  const size_t slice_bytes = quantized_bytes(slice_len, kBits, block);
  const size_t codes_bytes = data_bytes(slice_len, kBits);
  const size_t error_slice_bytes = quantized_bytes(slice_len, 8, block);
  const size_t scratch = size_t(std::min<int64_t>(block, slice_len));
  return for_each_block(slice_len, count, block, scratch, [&](const BlockAt& at, float* work) {
    uint8_t* base = out + static_cast<size_t>(at.slice) * slice_bytes;
    uint8_t* kept = error + static_cast<size_t>(at.slice) * error_slice_bytes;
    return quantize_block_with_feedback<kBits>(
        x + at.slice * slice_len + at.first, at.len, beta, base + data_bytes(at.first, kBits),
        base + codes_bytes + 4 * at.index, kept + at.first, kept + slice_len + 4 * at.index, work);
  });
}

template <class Read>
bool quantize_bits(Read x, int64_t slice_len, int64_t count, int bits, int block, uint8_t* out) {
  return bits == 8 ? quantize_all<8>(x, slice_len, count, block, out)
                   : quantize_all<4>(x, slice_len, count, block, out);
}

template <class Write>
void dequantize_bits(const uint8_t* in, int64_t slice_len, int64_t count, int bits, int block, Write out) {
  if (bits == 8) {
    dequantize_all<8>(in, slice_len, count, block, out);
  } else {
    dequantize_all<4>(in, slice_len, count, block, out);
  }
}

}  // namespace

bool valid_block_size(int64_t block) {
  return block > 0 && block % 8 == 0 && block <= (int64_t{1} << 30);
}

int64_t block_count(int64_t n, int block) {
  return (n + block - 1) / block;
}

size_t data_bytes(int64_t n, int bits) {
  return static_cast<size_t>(bits == 8 ? n : (n + 1) / 2);
}

size_t quantized_bytes(int64_t n, int bits, int block) {
  return data_bytes(n, bits) + sizeof(float) * static_cast<size_t>(block_count(n, block));
}

bool quantize_slices(const float* x, int64_t slice_len, int64_t count, int bits, int block, uint8_t* out) {
  check_arguments("quantize_slices", slice_len, count, bits, block);
  return quantize_bits(ReadF32{x}, slice_len, count, bits, block, out);
}

bool quantize_slices(const void* x, DType dtype, int64_t slice_len, int64_t count, int bits, int block,
                     uint8_t* out) {
  check_arguments("quantize_slices", slice_len, count, bits, block);
  switch (dtype) {
    case DType::kF32:
      return quantize_bits(ReadF32{static_cast<const float*>(x)}, slice_len, count, bits, block, out);
    case DType::kF16:
      return quantize_bits(ReadF16{static_cast<const uint16_t*>(x)}, slice_len, count, bits, block, out);
    case DType::kBF16:
      return quantize_bits(ReadBF16{static_cast<const uint16_t*>(x)}, slice_len, count, bits, block, out);
    default:
      throw std::invalid_argument(std::string("gpt::quant::quantize_slices: cannot quantize dtype ") +
                                  dtype_name(dtype) + "; pass f32, f16 or bf16");
  }
}

bool quantize_slices_with_feedback(const float* x, int64_t slice_len, int64_t count, int bits, int block,
                                   float beta, uint8_t* error, uint8_t* out) {
  check_arguments("quantize_slices_with_feedback", slice_len, count, bits, block);
  if (!(beta >= 0.0f && beta < 1.0f)) {
    throw std::invalid_argument("gpt::quant::quantize_slices_with_feedback: beta is " + std::to_string(beta) +
                                "; it must be in [0, 1)");
  }
  return bits == 8 ? quantize_all_with_feedback<8>(x, slice_len, count, block, beta, error, out)
                   : quantize_all_with_feedback<4>(x, slice_len, count, block, beta, error, out);
}

void dequantize_slices(const uint8_t* in, int64_t slice_len, int64_t count, int bits, int block, float* out,
                       DType round_to) {
  check_arguments("dequantize_slices", slice_len, count, bits, block);
  switch (round_to) {
    case DType::kF32:
      return dequantize_bits(in, slice_len, count, bits, block, WriteF32{out});
    case DType::kF16:
      return dequantize_bits(in, slice_len, count, bits, block, WriteRoundedF16{out});
    case DType::kBF16:
      return dequantize_bits(in, slice_len, count, bits, block, WriteRoundedBF16{out});
    default:
      throw std::invalid_argument(std::string("gpt::quant::dequantize_slices: cannot round to dtype ") +
                                  dtype_name(round_to) + "; pass f32, f16 or bf16");
  }
}

void dequantize_add_slices(const uint8_t* in, int64_t slice_len, int64_t count, int bits, int block,
                           float* acc) {
  check_arguments("dequantize_add_slices", slice_len, count, bits, block);
  dequantize_bits(in, slice_len, count, bits, block, AddF32{acc});
}

bool quantize_slice(const float* x, int64_t n, int bits, int block, uint8_t* out) {
  return quantize_slices(x, n, 1, bits, block, out);
}

bool quantize_slice(const void* x, DType dtype, int64_t n, int bits, int block, uint8_t* out) {
  return quantize_slices(x, dtype, n, 1, bits, block, out);
}

void dequantize_slice(const uint8_t* in, int64_t n, int bits, int block, float* out, DType round_to) {
  dequantize_slices(in, n, 1, bits, block, out, round_to);
}

void dequantize_add(const uint8_t* in, int64_t n, int bits, int block, float* acc) {
  dequantize_add_slices(in, n, 1, bits, block, acc);
}

}  // namespace gpt::quant
