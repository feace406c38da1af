// Block quantizer kernels; see quantize.h. The per-block and per-value math is
// kernels/quant/quantize_block.h, called here exactly as the CPU's quantize.cc calls it, so both backends
// write the same bytes.
//
// Work layout. A team of threads owns one quantization block at a time: one warp for blocks of up to 256
// values (eight teams per thread block, each on its own), else the whole thread block (up to 256 threads).
// Each thread takes groups of 8 consecutive values (32 bytes of fp32, 16 of fp16/bf16), so a group never
// straddles two blocks (block sizes are multiples of 8) and loads and stores are 16-byte (codes 8- or
// 4-byte) vectors where the block's start is aligned; a slice's short last group goes value by value.
//
// Quantizing a block takes two passes over its values: the absmax (an integer max of magnitude bits, which
// also flags inf and NaN, as quantize_block.h intends), then the codes. The second pass reads the values
// again rather than staging them, so any block size works; the re-read of a few KiB hits the caches. The
// team's max is a butterfly of warp shuffles plus, across warps, a fixed walk over shared memory: max is
// order-independent anyway, and it is an exact integer max. Nothing here uses float atomics, so every run
// writes the same bits.
#include "kernels/cuda/quantize.h"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/quant/quantize.h"
#include "kernels/quant/quantize_block.h"
#include "tensor/half.h"

namespace gpt::cuda {
namespace {

using quant::block_is_finite;
using quant::block_scale;
using quant::magnitude_bits;
using quant::qmax_of;

constexpr int kGroup = 8;  // values per thread step
constexpr int kWarp = 32;
constexpr int kThreads = 256;  // per thread block
constexpr int64_t kMaxGrid = int64_t{1} << 20;

// `count` quantized slices back to back (kernels/quant/quantize.h): where slice i and its scales start.
struct Layout {
  int64_t slice_len = 0;
  int64_t blocks_per_slice = 0;
  int64_t total_blocks = 0;
  int64_t slice_bytes = 0;  // one quantized slice: codes, then scales
  int64_t codes_bytes = 0;  // its codes
  int block = 0;
};

Layout make_layout(int64_t slice_len, int64_t count, int bits, int block) {
  Layout l;
  l.slice_len = slice_len;
  l.blocks_per_slice = quant::block_count(slice_len, block);
  l.total_blocks = l.blocks_per_slice * count;
  l.slice_bytes = static_cast<int64_t>(quant::quantized_bytes(slice_len, bits, block));
  l.codes_bytes = static_cast<int64_t>(quant::data_bytes(slice_len, bits));
  l.block = block;
  return l;
}

// One quantization block: its slice, its index within the slice, its first value there, its length.
struct Span {
  int64_t slice, index, first;
  int len;
};

__device__ Span span_of(const Layout& l, int64_t g) {
  const int64_t slice = g / l.blocks_per_slice, index = g - slice * l.blocks_per_slice;
  const int64_t first = index * l.block, rest = l.slice_len - first;
  return {slice, index, first, static_cast<int>(rest < l.block ? rest : l.block)};
}

// Which blocks a team walks (first, first + stride, ...) and the thread's place in its team.
struct TeamPosition {
  int64_t first_block, stride;
  int lane, size;
};

__device__ TeamPosition team_position(int team_size) {
  const int teams = static_cast<int>(blockDim.x) / team_size;
  return {static_cast<int64_t>(blockIdx.x) * teams + threadIdx.x / team_size,
          static_cast<int64_t>(gridDim.x) * teams, static_cast<int>(threadIdx.x) % team_size, team_size};
}

// Max over a team, returned to all of it. A warp team needs shuffles only; a larger team is the whole thread
// block, whose warps meet in shared memory (the second barrier lets the next call reuse it).
__device__ uint32_t team_max(uint32_t v, int team_size, uint32_t* warp_max) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v = max(v, __shfl_xor_sync(0xffffffffu, v, offset));
  if (team_size == kWarp) return v;
  if (threadIdx.x % kWarp == 0) warp_max[threadIdx.x / kWarp] = v;
  __syncthreads();
  v = 0;
  for (int w = 0; w < team_size / kWarp; ++w) v = max(v, warp_max[w]);
  __syncthreads();
  return v;
}

__device__ __forceinline__ bool aligned(const void* p, unsigned bytes) {
  return (reinterpret_cast<uintptr_t>(p) & (bytes - 1)) == 0;
}

// Byte offset of value i's code within a slice's codes: i for int8, i / 2 for int4 (i even here). A full
// group's codes take kBits bytes, which is the alignment their vector store needs.
template <int kBits>
__device__ __forceinline__ int64_t code_offset(int64_t i) {
  return kBits == 8 ? i : i / 2;
}

// absmax (as magnitude bits) of the first n values of a group; padding never counts.
template <class Input>
__device__ __forceinline__ uint32_t group_absmax(const typename Input::Group& g, int n) {
  uint32_t m = 0;
#pragma unroll
  for (int k = 0; k < kGroup; ++k) m = max(m, k < n ? magnitude_bits(Input::value(g, k)) : 0u);
  return m;
}

// ---- Loads and stores of one group of n <= 8 values (vector: the full group may move as vectors). --------

// The input readers: load(p, n, vector) reads a group as stored (the bits past n as zero), value(group, k)
// widens value k exactly to fp32 (tensor/half.h's conversions, as the CPU's). Keeping fp16/bf16 groups packed
// until each value is used halves the registers live across the quantizer's divisions.
struct F32Input {
  using Storage = float;
  struct Group {
    float v[kGroup];
  };
  __device__ static Group load(const float* p, int n, bool vector) {
    if (n == kGroup && vector) {
      const float4 a = __ldg(reinterpret_cast<const float4*>(p));
      const float4 b = __ldg(reinterpret_cast<const float4*>(p) + 1);
      return {{a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w}};
    }
    Group g;
#pragma unroll
    for (int k = 0; k < kGroup; ++k) g.v[k] = k < n ? __ldg(p + k) : 0.0f;
    return g;
  }
  __device__ static float value(const Group& g, int k) {
    return g.v[k];
  }
};

struct WidenF16 {
  __device__ __forceinline__ float operator()(uint16_t bits) const { return gpt::f16_to_f32(bits); }
};
struct WidenBF16 {
  __device__ __forceinline__ float operator()(uint16_t bits) const { return gpt::bf16_to_f32(bits); }
};

template <class Widen>
struct HalfInput {
  using Storage = uint16_t;
  struct Group {
    uint32_t w[kGroup / 2];  // value 2k in the low half of w[k], 2k + 1 in the high half
  };
  __device__ static Group load(const uint16_t* p, int n, bool vector) {
    if (n == kGroup && vector) {
      const uint4 w = __ldg(reinterpret_cast<const uint4*>(p));
      return {{w.x, w.y, w.z, w.w}};
    }
    Group g{};
#pragma unroll
    for (int k = 0; k < kGroup; ++k) {
      if (k < n) g.w[k / 2] |= uint32_t{__ldg(p + k)} << (16 * (k % 2));
    }
    return g;
  }
  __device__ static float value(const Group& g, int k) {
    return Widen{}(static_cast<uint16_t>(g.w[k / 2] >> (16 * (k % 2))));
  }
};
using F16Input = HalfInput<WidenF16>;
using BF16Input = HalfInput<WidenBF16>;

__device__ __forceinline__ uint32_t pack_bytes(uint32_t b0, uint32_t b1, uint32_t b2, uint32_t b3) {
  return (b0 & 0xffu) | (b1 & 0xffu) << 8 | (b2 & 0xffu) << 16 | (b3 & 0xffu) << 24;
}

// The codes of one group as they lie in memory: int8 one per byte (lo, then hi); int4 two per byte in lo,
// value 2k in the low nibble of byte k and 2k + 1 in its high one (quant::pack_int4's order), so an odd last
// value leaves a zero high nibble. Building codes into these words as they are computed keeps few registers
// live across the divisions (whose slow path is a subroutine call).
struct PackedCodes {
  uint32_t lo = 0, hi = 0;
};

template <int kBits>
__device__ __forceinline__ void pack_code(PackedCodes& c, int k, int q) {
  if constexpr (kBits == 8) {
    (k < 4 ? c.lo : c.hi) |= (static_cast<uint32_t>(q) & 0xffu) << (8 * (k % 4));
  } else {
    c.lo |= (static_cast<uint32_t>(q) & 0xfu) << (4 * k);
  }
}

template <int kBits>
__device__ __forceinline__ int code_at(const PackedCodes& c, int k) {
  if constexpr (kBits == 8) {
    return static_cast<int8_t>((k < 4 ? c.lo : c.hi) >> (8 * (k % 4)));
  } else {
    const uint8_t byte = static_cast<uint8_t>(c.lo >> (8 * (k / 2)));
    return k % 2 == 0 ? quant::unpack_int4_low(byte) : quant::unpack_int4_high(byte);
  }
}

// The codes of a group of n values at p: one vector store when the whole group is there and aligned.
template <int kBits>
__device__ void store_codes(uint8_t* p, const PackedCodes& c, int n, bool vector) {
  if constexpr (kBits == 8) {
    if (n == kGroup && vector) {
      *reinterpret_cast<uint2*>(p) = make_uint2(c.lo, c.hi);
      return;
    }
#pragma unroll
    for (int k = 0; k < kGroup; ++k) {
      if (k < n) p[k] = static_cast<uint8_t>((k < 4 ? c.lo : c.hi) >> (8 * (k % 4)));
    }
  } else {
    if (n == kGroup && vector) {
      *reinterpret_cast<uint32_t*>(p) = c.lo;
      return;
    }
#pragma unroll
    for (int k = 0; k < kGroup / 2; ++k) {
      if (2 * k < n) p[k] = static_cast<uint8_t>(c.lo >> (8 * k));
    }
  }
}

// Plain loads (not the read-only path): the error feedback reads codes it later overwrites. Bytes past the
// group's n values read as 0.
template <int kBits>
__device__ PackedCodes load_codes(const uint8_t* p, int n, bool vector) {
  PackedCodes c;
  if constexpr (kBits == 8) {
    if (n == kGroup && vector) {
      const uint2 w = *reinterpret_cast<const uint2*>(p);
      return {w.x, w.y};
    }
#pragma unroll
    for (int k = 0; k < kGroup; ++k) {
      if (k < n) (k < 4 ? c.lo : c.hi) |= uint32_t{p[k]} << (8 * (k % 4));
    }
  } else {
    if (n == kGroup && vector) return {*reinterpret_cast<const uint32_t*>(p), 0};
#pragma unroll
    for (int k = 0; k < kGroup / 2; ++k) {
      if (2 * k < n) c.lo |= uint32_t{p[k]} << (8 * k);
    }
  }
  return c;
}

__device__ void load_floats(const float* p, int n, bool vector, float v[kGroup]) {
  if (n == kGroup && vector) {
    const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
    return;
  }
#pragma unroll
  for (int k = 0; k < kGroup; ++k) v[k] = k < n ? p[k] : 0.0f;
}

__device__ void store_floats(float* p, const float v[kGroup], int n, bool vector) {
  if (n == kGroup && vector) {
    reinterpret_cast<float4*>(p)[0] = make_float4(v[0], v[1], v[2], v[3]);
    reinterpret_cast<float4*>(p)[1] = make_float4(v[4], v[5], v[6], v[7]);
    return;
  }
#pragma unroll
  for (int k = 0; k < kGroup; ++k) {
    if (k < n) p[k] = v[k];
  }
}

// Scales sit unaligned after the codes, in native (little-endian) byte order.
__device__ float load_scale(const uint8_t* p) {
  return float_of(pack_bytes(p[0], p[1], p[2], p[3]));
}

__device__ void store_scale(uint8_t* p, float scale) {
  const uint32_t bits = bits_of(scale);
#pragma unroll
  for (int k = 0; k < 4; ++k) p[k] = static_cast<uint8_t>(bits >> (8 * k));
}

// ---- NaNs as the CPU makes them -------------------------------------------------------------------------
// An operation on a NaN returns that NaN, quieted, on the CPU (x86 SSE/AVX; ARM outside default-NaN mode),
// while the GPU returns its canonical 0x7fffffff. Only non-finite blocks (NaN scale) dequantize to NaN, so
// mirroring the CPU there is one select per value, and the bytes stay identical.
__device__ __forceinline__ float quieted(float nan) {
  return float_of(bits_of(nan) | 0x00400000u);
}

__device__ __forceinline__ float dequantize_like_host(int q, float scale) {
  return scale != scale ? quieted(scale) : quant::dequantize_value(q, scale);
}

// acc + v, one rounding, with a NaN operand's NaN as the result. When both are NaN the CPU's choice depends
// on the operand order its compiler picked for `acc += v`; this takes acc's.
__device__ __forceinline__ float add_like_host(float acc, float v) {
  const float sum = quant::add_rn(acc, v);
  if (sum == sum) return sum;
  if (acc != acc) return quieted(acc);
  return v != v ? quieted(v) : sum;
}

// What becomes of a dequantized value: stored (rounded through fp16 or bf16 if asked), or added.
struct StoreF32 {
  static constexpr bool kReadsOutput = false;
  __device__ static float apply(float, float v) { return v; }
};
struct StoreRoundedF16 {
  static constexpr bool kReadsOutput = false;
  __device__ static float apply(float, float v) { return gpt::round_to_f16(v); }
};
struct StoreRoundedBF16 {
  static constexpr bool kReadsOutput = false;
  __device__ static float apply(float, float v) { return gpt::round_to_bf16(v); }
};
struct AddF32 {
  static constexpr bool kReadsOutput = true;
  __device__ static float apply(float acc, float v) { return add_like_host(acc, v); }
};

// ---- Kernels ----------------------------------------------------------------------------------------------

template <class Input, int kBits>
__global__ void __launch_bounds__(kThreads)
    quantize_kernel(const typename Input::Storage* x, Layout layout, int team_size, uint8_t* out,
                    uint32_t* nonfinite) {
  __shared__ uint32_t warp_max[kThreads / kWarp];
  constexpr int qmax = qmax_of(kBits);
  const TeamPosition team = team_position(team_size);
  for (int64_t g = team.first_block; g < layout.total_blocks; g += team.stride) {
    const Span at = span_of(layout, g);
    const typename Input::Storage* values = x + at.slice * layout.slice_len + at.first;
    uint8_t* slice_out = out + at.slice * layout.slice_bytes;
    uint8_t* codes = slice_out + code_offset<kBits>(at.first);
    const bool vector_in = aligned(values, 16), vector_out = aligned(codes, kBits);

    uint32_t absmax = 0;
    for (int j = team.lane * kGroup; j < at.len; j += team.size * kGroup) {
      const int n = min(kGroup, at.len - j);
      absmax = max(absmax, group_absmax<Input>(Input::load(values + j, n, vector_in), n));
    }
    absmax = team_max(absmax, team.size, warp_max);
    // A non-finite block's scale is NaN, for which quantize_value gives 0: the CPU's zeroed codes.
    const float scale = block_scale(absmax, qmax);
    for (int j = team.lane * kGroup; j < at.len; j += team.size * kGroup) {
      const int n = min(kGroup, at.len - j);
      const typename Input::Group v = Input::load(values + j, n, vector_in);
      PackedCodes c;
#pragma unroll
      for (int k = 0; k < kGroup; ++k) {
        if (k < n) pack_code<kBits>(c, k, quant::quantize_value(Input::value(v, k), scale, qmax));
      }
      store_codes<kBits>(codes + code_offset<kBits>(j), c, n, vector_out);
    }
    if (team.lane == 0) {
      store_scale(slice_out + layout.codes_bytes + 4 * at.index, scale);
      if (!block_is_finite(absmax)) *nonfinite = 1;
    }
  }
}

// One block of the error-feedback quantizer: where its values, codes and kept error are, and the constants.
struct FeedbackBlock {
  const float* x;
  uint8_t* codes;
  uint8_t* kept_codes;
  float kept_scale;  // the old kept error's, read before the block's first barrier
  int len;
  bool vector_x, vector_codes, vector_kept;
  float beta, one_minus_beta;
};

// h = x + kept error for the n values of the group at j, and the kept error itself (padding: 0).
__device__ void compensated_group(const FeedbackBlock& b, int j, int n, F32Input::Group& h,
                                  float kept[kGroup]) {
  const F32Input::Group x = F32Input::load(b.x + j, n, b.vector_x);
  const PackedCodes kept_codes = load_codes<8>(b.kept_codes + j, n, b.vector_kept);
#pragma unroll
  for (int k = 0; k < kGroup; ++k) {
    kept[k] = quant::dequantize_value(code_at<8>(kept_codes, k), b.kept_scale);
    h.v[k] = quant::compensate(x.v[k], kept[k]);
  }
}

// Pass 1: this thread's absmax of h.
__device__ uint32_t compensated_absmax(const FeedbackBlock& b, const TeamPosition& team) {
  uint32_t absmax = 0;
  for (int j = team.lane * kGroup; j < b.len; j += team.size * kGroup) {
    const int n = min(kGroup, b.len - j);
    F32Input::Group h;
    float kept[kGroup];
    compensated_group(b, j, n, h, kept);
    absmax = max(absmax, group_absmax<F32Input>(h, n));
  }
  return absmax;
}

// Pass 2 (error_scale unused) writes h's codes and returns this thread's absmax of the new kept error e'
// (quantize_block.h's feedback_error); pass 3 (with e''s scale) writes e''s int8 codes over the old ones.
template <int kBits, bool kKeptPass>
__device__ uint32_t feedback_pass(const FeedbackBlock& b, const TeamPosition& team, float scale,
                                  float error_scale) {
  uint32_t error_absmax = 0;
  for (int j = team.lane * kGroup; j < b.len; j += team.size * kGroup) {
    const int n = min(kGroup, b.len - j);
    F32Input::Group h;
    float kept[kGroup];
    compensated_group(b, j, n, h, kept);
    PackedCodes c;
#pragma unroll
    for (int k = 0; k < kGroup; ++k) {
      if (k >= n) continue;
      const int q = quant::quantize_value(h.v[k], scale, qmax_of(kBits));
      const float next_error = quant::feedback_error(h.v[k], q, scale, kept[k], b.beta, b.one_minus_beta);
      if constexpr (kKeptPass) {
        pack_code<8>(c, k, quant::quantize_value(next_error, error_scale, qmax_of(8)));
      } else {
        pack_code<kBits>(c, k, q);
        error_absmax = max(error_absmax, magnitude_bits(next_error));
      }
    }
    if constexpr (kKeptPass) {
      store_codes<8>(b.kept_codes + j, c, n, b.vector_kept);
    } else {
      store_codes<kBits>(b.codes + code_offset<kBits>(j), c, n, b.vector_codes);
    }
  }
  return error_absmax;
}

// A non-finite block: zero codes (its scale is NaN), and nothing worth keeping, so the kept error is cleared.
template <int kBits>
__device__ void clear_feedback_block(const FeedbackBlock& b, const TeamPosition& team) {
  for (int j = team.lane * kGroup; j < b.len; j += team.size * kGroup) {
    const int n = min(kGroup, b.len - j);
    store_codes<kBits>(b.codes + code_offset<kBits>(j), PackedCodes{}, n, b.vector_codes);
    store_codes<8>(b.kept_codes + j, PackedCodes{}, n, b.vector_kept);
  }
}

// Three passes, each recomputing h from x and the old kept codes: absmax of h; h's codes and absmax of e';
// e''s int8 codes. Each thread only ever touches its own groups' kept codes, so the third pass may overwrite
// what the earlier ones read; the old kept scale is read before the first barrier and replaced last.
template <int kBits>
__global__ void __launch_bounds__(kThreads)
    quantize_with_feedback_kernel(const float* x, Layout layout, int64_t error_slice_bytes, int team_size,
                                  float beta, float one_minus_beta, uint8_t* error, uint8_t* out,
                                  uint32_t* nonfinite) {
  __shared__ uint32_t warp_max[kThreads / kWarp];
  const TeamPosition team = team_position(team_size);
  for (int64_t g = team.first_block; g < layout.total_blocks; g += team.stride) {
    const Span at = span_of(layout, g);
    uint8_t* slice_out = out + at.slice * layout.slice_bytes;
    uint8_t* kept_slice = error + at.slice * error_slice_bytes;
    uint8_t* kept_scale_slot = kept_slice + layout.slice_len + 4 * at.index;
    FeedbackBlock b{x + at.slice * layout.slice_len + at.first, slice_out + code_offset<kBits>(at.first),
                    kept_slice + at.first, load_scale(kept_scale_slot), at.len};
    b.vector_x = aligned(b.x, 16);
    b.vector_codes = aligned(b.codes, kBits);
    b.vector_kept = aligned(b.kept_codes, 8);
    b.beta = beta;
    b.one_minus_beta = one_minus_beta;

    const uint32_t absmax = team_max(compensated_absmax(b, team), team.size, warp_max);
    const float scale = block_scale(absmax, qmax_of(kBits));
    if (team.lane == 0) store_scale(slice_out + layout.codes_bytes + 4 * at.index, scale);
    if (!block_is_finite(absmax)) {
      clear_feedback_block<kBits>(b, team);
      if (team.lane == 0) {
        store_scale(kept_scale_slot, 0.0f);
        *nonfinite = 1;
      }
      continue;
    }
    const uint32_t error_absmax =
        team_max(feedback_pass<kBits, false>(b, team, scale, 0.0f), team.size, warp_max);
    const float error_scale = block_scale(error_absmax, qmax_of(8));
    feedback_pass<kBits, true>(b, team, scale, error_scale);
    if (team.lane == 0) store_scale(kept_scale_slot, error_scale);
  }
}

template <int kBits, class Output>
__global__ void __launch_bounds__(kThreads)
    dequantize_kernel(const uint8_t* in, Layout layout, int team_size, float* out) {
  const TeamPosition team = team_position(team_size);
  for (int64_t g = team.first_block; g < layout.total_blocks; g += team.stride) {
    const Span at = span_of(layout, g);
    const uint8_t* slice_in = in + at.slice * layout.slice_bytes;
    const uint8_t* codes = slice_in + code_offset<kBits>(at.first);
    const float scale = load_scale(slice_in + layout.codes_bytes + 4 * at.index);
    float* values = out + at.slice * layout.slice_len + at.first;
    const bool vector_codes = aligned(codes, kBits), vector_out = aligned(values, 16);
    for (int j = team.lane * kGroup; j < at.len; j += team.size * kGroup) {
      const int n = min(kGroup, at.len - j);
      const PackedCodes c = load_codes<kBits>(codes + code_offset<kBits>(j), n, vector_codes);
      float v[kGroup] = {};
      if constexpr (Output::kReadsOutput) load_floats(values + j, n, vector_out, v);
#pragma unroll
      for (int k = 0; k < kGroup; ++k)
        v[k] = Output::apply(v[k], dequantize_like_host(code_at<kBits>(c, k), scale));
      store_floats(values + j, v, n, vector_out);
    }
  }
}

// ---- Launch shapes ----------------------------------------------------------------------------------------

struct LaunchShape {
  unsigned blocks;
  int threads;
  int team;
};

// One thread per group of a block, in whole warps, at most a thread block; warp teams share a thread block.
LaunchShape launch_shape(const Layout& l) {
  const int64_t values = std::min<int64_t>(l.block, l.slice_len);
  const int64_t groups = (values + kGroup - 1) / kGroup;
  const int team =
      static_cast<int>(std::clamp<int64_t>((groups + kWarp - 1) / kWarp * kWarp, kWarp, kThreads));
  const int threads = team == kWarp ? kThreads : team;
  const int64_t teams_per_block = threads / team;
  const int64_t blocks = std::min((l.total_blocks + teams_per_block - 1) / teams_per_block, kMaxGrid);
  return {static_cast<unsigned>(blocks), threads, team};
}

template <class Input, int kBits>
void launch_quantize(const Context& ctx, const void* x, const Layout& l, uint8_t* out, uint32_t* nonfinite) {
  const LaunchShape s = launch_shape(l);
  quantize_kernel<Input, kBits><<<s.blocks, s.threads, 0, ctx.stream()>>>(
      static_cast<const typename Input::Storage*>(x), l, s.team, out, nonfinite);
  GPT_CUDA_CHECK(cudaGetLastError());
}

template <class Input>
void launch_quantize_bits(const Context& ctx, const void* x, const Layout& l, int bits, uint8_t* out,
                          uint32_t* nonfinite) {
  if (bits == 8) {
    launch_quantize<Input, 8>(ctx, x, l, out, nonfinite);
  } else {
    launch_quantize<Input, 4>(ctx, x, l, out, nonfinite);
  }
}

template <int kBits, class Output>
void launch_dequantize(const Context& ctx, const uint8_t* in, const Layout& l, float* out) {
  const LaunchShape s = launch_shape(l);
  dequantize_kernel<kBits, Output><<<s.blocks, s.threads, 0, ctx.stream()>>>(in, l, s.team, out);
  GPT_CUDA_CHECK(cudaGetLastError());
}

template <class Output>
void launch_dequantize_bits(const Context& ctx, const uint8_t* in, const Layout& l, int bits, float* out) {
  if (bits == 8) {
    launch_dequantize<8, Output>(ctx, in, l, out);
  } else {
    launch_dequantize<4, Output>(ctx, in, l, out);
  }
}

}  // namespace

void quantize_blocks(const Context& ctx, const void* x, DType dtype, int64_t slice_len, int64_t count,
                     int bits, int block, uint8_t* out, uint32_t* nonfinite) {
  const Layout l = make_layout(slice_len, count, bits, block);
  if (l.total_blocks == 0) return;
  switch (dtype) {
    case DType::kF32:
      return launch_quantize_bits<F32Input>(ctx, x, l, bits, out, nonfinite);
    case DType::kF16:
      return launch_quantize_bits<F16Input>(ctx, x, l, bits, out, nonfinite);
    case DType::kBF16:
      return launch_quantize_bits<BF16Input>(ctx, x, l, bits, out, nonfinite);
    default:
      throw std::invalid_argument(std::string("gpt::cuda::quantize_blocks: cannot quantize dtype ") +
                                  dtype_name(dtype));
  }
}

void quantize_blocks_with_feedback(const Context& ctx, const float* x, int64_t slice_len, int64_t count,
                                   int bits, int block, float beta, float one_minus_beta, uint8_t* error,
                                   uint8_t* out, uint32_t* nonfinite) {
  const Layout l = make_layout(slice_len, count, bits, block);
  if (l.total_blocks == 0) return;
  const int64_t error_slice_bytes = static_cast<int64_t>(quant::quantized_bytes(slice_len, 8, block));
  const LaunchShape s = launch_shape(l);
  if (bits == 8) {
    quantize_with_feedback_kernel<8><<<s.blocks, s.threads, 0, ctx.stream()>>>(
        x, l, error_slice_bytes, s.team, beta, one_minus_beta, error, out, nonfinite);
  } else {
    quantize_with_feedback_kernel<4><<<s.blocks, s.threads, 0, ctx.stream()>>>(
        x, l, error_slice_bytes, s.team, beta, one_minus_beta, error, out, nonfinite);
  }
  GPT_CUDA_CHECK(cudaGetLastError());
}

void dequantize_blocks(const Context& ctx, const uint8_t* in, int64_t slice_len, int64_t count, int bits,
                       int block, float* out, DType round_to) {
  const Layout l = make_layout(slice_len, count, bits, block);
  if (l.total_blocks == 0) return;
  switch (round_to) {
    case DType::kF32:
      return launch_dequantize_bits<StoreF32>(ctx, in, l, bits, out);
    case DType::kF16:
      return launch_dequantize_bits<StoreRoundedF16>(ctx, in, l, bits, out);
    case DType::kBF16:
      return launch_dequantize_bits<StoreRoundedBF16>(ctx, in, l, bits, out);
    default:
      throw std::invalid_argument(std::string("gpt::cuda::dequantize_blocks: cannot round to dtype ") +
                                  dtype_name(round_to));
  }
}

void dequantize_add_blocks(const Context& ctx, const uint8_t* in, int64_t slice_len, int64_t count, int bits,
                           int block, float* acc) {
  const Layout l = make_layout(slice_len, count, bits, block);
  if (l.total_blocks == 0) return;
  launch_dequantize_bits<AddF32>(ctx, in, l, bits, acc);
}

}  // namespace gpt::cuda
