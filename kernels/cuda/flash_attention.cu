// FlashAttention-2 kernels (flash_attention.h), in kernels/cpu/flash_attention.h's tile order: the forward
// (one block per (query tile, head, sequence), key tiles in ascending order with the online softmax), and the
// backward as three kernels: Dr_i = dot(dout_i, out_i) per row, dK and dV per key tile (query tiles
// ascending), dQ per query tile (key tiles ascending). Each block keeps its own partial sums and adds them in
// the reference's order, so nothing is added atomically.
//
// Every tile is 64 x 64 (or 64 x hs), 256 threads. A matmul (tile_product) gives each thread the elements
// e = threadIdx.x + 256 o of its row-major [M, N] result; with fp32 inputs the thread computes them itself as
// fma chains over k ascending from 0 (the reference's order, bit for bit), with bf16/fp16 inputs the warps
// run WMMA fragments, store them to an fp32 scratch tile and the thread reads its elements from there. So the
// softmax steps, the accumulators (registers, indexed by o) and the stores are the same code for both.
// Shared memory: the [64, hs] tiles of q, k, v, dout in the matmul input type (rows padded: an odd stride
// for fp32, conflict-free for the fma loops; +8 halves for WMMA, whose ldm must be a multiple of 8 and whose
// fragment pointers must be 32-byte aligned: every fragment starts at a row that is a multiple of 16 and a
// column that is a multiple of 16), the fp32 score tiles, and the per-row statistics.
#include <mma.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "kernels/common/dropout_bits.h"
#include "kernels/common/flash_tiles.h"
#include "kernels/cuda/attention_dropout.cuh"
#include "kernels/cuda/dtype.cuh"
#include "kernels/cuda/flash_attention.h"

namespace gpt::cuda {
namespace {

namespace wmma = nvcuda::wmma;

constexpr int kRows = kFlashTileRows;  // Br
constexpr int kCols = kFlashTileCols;  // Bc
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
static_assert(kRows == 64 && kCols == 64, "the thread mapping below is written for 64 x 64 tiles");

// Whether a matmul input type runs on tensor cores (fp32 never does: exact fma chains, no TF32).
template <typename Mma>
constexpr bool kTensorCores = !std::is_same_v<Mma, float>;

// Row stride of a tile of kWidth matmul inputs, and of an fp32 tile of kWidth (scores; WMMA's scratch).
template <typename Mma, int kWidth>
constexpr int input_ld() {
  return kTensorCores<Mma> ? kWidth + 8 : kWidth + 1;
}
template <typename Mma, int kWidth>
constexpr int f32_ld() {
  return kTensorCores<Mma> ? kWidth + 4 : kWidth + 1;
}

constexpr size_t round128(size_t bytes) {
  return (bytes + 127) / 128 * 128;
}

struct Shape {
  int T, C, NH;
  float scale;  // 1/sqrt(hs), rounded as the CPU rounds it
};

// Whether probability (i, j) of head h in sequence bl of the launch survives dropout.
__device__ __forceinline__ bool keeps(const AttentionDropParams& drop, int bl, int h, int T, int i, int j) {
  const uint64_t t = uint64_t(T);
  const uint64_t counter = drop.offset + uint64_t(h) * t * t + uint64_t(i) * t + uint64_t(j);
  return dropout::keeps(drop.keys[bl], counter, drop.threshold);
}

// The row and column of element o of a thread's share of a row-major [*, kN] tile.
template <int kN>
__device__ __forceinline__ int owned_row(int o) {
  return int(threadIdx.x) / kN + o * (kThreads / kN);
}
template <int kN>
__device__ __forceinline__ int owned_col() {
  return int(threadIdx.x) % kN;
}

enum class Layout {
  kRow,
  kCol
};  // A(m, k) = a[m*lda + k] or a[k*lda + m]; B(k, n) = b[k*ldb + n] or b[n*ldb + k]

// [kM, kN] = A [kM, kK] B [kK, kN] on tensor cores: each warp's fragments stored to scratch (row-major, ldm
// lds), then consume(o, row, col, value) for the thread's elements. Two barriers: before the stores (so
// earlier readers of the scratch are done) and after them.
template <typename Mma, int kM, int kN, int kK, Layout kA, Layout kB, typename F>
__device__ __forceinline__ void wmma_product(const Mma* a, int lda, const Mma* b, int ldb, float* scratch,
                                             int lds, F&& consume) {
  using ALayout = std::conditional_t<kA == Layout::kRow, wmma::row_major, wmma::col_major>;
  using BLayout = std::conditional_t<kB == Layout::kRow, wmma::row_major, wmma::col_major>;
  constexpr int kFragCols = kN / 16, kPerWarp = kM / 16 * kFragCols / kWarps;
  static_assert(kM / 16 * kFragCols % kWarps == 0, "fragments split evenly among the warps");
  const int warp = int(threadIdx.x) / 32;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[kPerWarp];
#pragma unroll
  for (int f = 0; f < kPerWarp; ++f) wmma::fill_fragment(acc[f], 0.0f);
#pragma unroll 1  // unrolled, the hoisted fragment loads of the next steps cost registers (spills at hs = 64)
  for (int k = 0; k < kK; k += 16) {
#pragma unroll
    for (int f = 0; f < kPerWarp; ++f) {
      const int frag = warp + kWarps * f, fm = frag / kFragCols * 16, fn = frag % kFragCols * 16;
      wmma::fragment<wmma::matrix_a, 16, 16, 16, Mma, ALayout> af;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, Mma, BLayout> bf;
      wmma::load_matrix_sync(af, kA == Layout::kRow ? a + fm * lda + k : a + k * lda + fm, lda);
      wmma::load_matrix_sync(bf, kB == Layout::kRow ? b + k * ldb + fn : b + fn * ldb + k, ldb);
      wmma::mma_sync(acc[f], af, bf, acc[f]);
    }
  }
  __syncthreads();
#pragma unroll
  for (int f = 0; f < kPerWarp; ++f) {
    const int frag = warp + kWarps * f, fm = frag / kFragCols * 16, fn = frag % kFragCols * 16;
    wmma::store_matrix_sync(scratch + fm * lds + fn, acc[f], lds, wmma::mem_row_major);
  }
  __syncthreads();
#pragma unroll
  for (int o = 0; o < kM * kN / kThreads; ++o) {
    const int row = owned_row<kN>(o), col = owned_col<kN>();
    consume(o, row, col, scratch[row * lds + col]);
  }
}

// The same product in fp32 fma chains, k ascending from 0 (the CPU reference's dots); no barrier, no scratch.
template <int kM, int kN, int kK, Layout kA, Layout kB, typename F>
__device__ __forceinline__ void fma_product(const float* a, int lda, const float* b, int ldb, F&& consume) {
  constexpr int kOwned = kM * kN / kThreads;
  float acc[kOwned];
#pragma unroll
  for (int o = 0; o < kOwned; ++o) acc[o] = 0.0f;
  const int col = owned_col<kN>();
  for (int k = 0; k < kK; ++k) {
    const float bv = kB == Layout::kRow ? b[k * ldb + col] : b[col * ldb + k];
#pragma unroll
    for (int o = 0; o < kOwned; ++o) {
      const int row = owned_row<kN>(o);
      const float av = kA == Layout::kRow ? a[row * lda + k] : a[k * lda + row];
      acc[o] = fmaf(av, bv, acc[o]);
    }
  }
#pragma unroll
  for (int o = 0; o < kOwned; ++o) consume(o, owned_row<kN>(o), col, acc[o]);
}

// A [kM, kN] matmul of shared-memory tiles by the input type: tensor cores (scratch used, barriers inside:
// call from uniform control flow) or fp32 fma chains (scratch unused).
template <typename Mma, int kM, int kN, int kK, Layout kA, Layout kB, typename F>
__device__ __forceinline__ void tile_product(const Mma* a, int lda, const Mma* b, int ldb, float* scratch,
                                             int lds, F&& consume) {
  static_assert(kM * kN % kThreads == 0 && kK % 16 == 0, "whole fragments and whole shares");
  if constexpr (kTensorCores<Mma>) {
    wmma_product<Mma, kM, kN, kK, kA, kB>(a, lda, b, ldb, scratch, lds, consume);
  } else {
    fma_product<kM, kN, kK, kA, kB>(a, lda, b, ldb, consume);
  }
}

// Rows row0..row0+63 (rows at or past T are zeros) of a [*, kHs] slice with row stride `stride` into a
// tile of matmul inputs (row stride ld), each value widened to fp32 and rounded to Mma once. Where the
// activations already are the matmul's half type, the values are copied as they are, 8 to a 16-byte load
// when the slice allows it (its start 16-byte aligned, the row stride a multiple of 8; the tile's rows always
// are: ld is a multiple of 8 halves from a 128-byte boundary). The same bits either way.
template <int kHs, typename Act, typename Mma>
__device__ void load_rows(Mma* tile, int ld, const Act* src, int64_t stride, int row0, int T) {
  if constexpr (std::is_same_v<Act, Mma> && kTensorCores<Mma>) {
    constexpr int kPer = 16 / sizeof(Mma), kChunks = kHs / kPer;
    static_assert(kHs % kPer == 0, "whole 16-byte chunks per row");
    if (reinterpret_cast<uintptr_t>(src) % 16 == 0 && stride % kPer == 0) {
      for (int idx = threadIdx.x; idx < kRows * kChunks; idx += kThreads) {
        const int r = idx / kChunks, d = idx % kChunks * kPer, row = row0 + r;
        const uint4 v = row < T ? *reinterpret_cast<const uint4*>(src + int64_t(row) * stride + d)
                                : make_uint4(0, 0, 0, 0);
        *reinterpret_cast<uint4*>(tile + r * ld + d) = v;
      }
      return;
    }
  }
  for (int idx = threadIdx.x; idx < kRows * kHs; idx += kThreads) {
    const int r = idx / kHs, d = idx % kHs, row = row0 + r;
    tile[r * ld + d] = from_float<Mma>(row < T ? to_float(src[int64_t(row) * stride + d]) : 0.0f);
  }
}

// ---- forward ----

// The forward's shared memory: q, k, v tiles, the scores s (fp32, then the probabilities), the dropped
// probabilities p (matmul inputs), WMMA's scratch for P V, and the rows' m, m', l and alpha.
template <typename Mma, int kHs>
struct ForwardSmem {
  static constexpr int kLd = input_ld<Mma, kHs>(), kSLd = f32_ld<Mma, kCols>(), kPLd = input_ld<Mma, kCols>();
  static constexpr int kOLd = kHs + 4;
  static constexpr size_t kTile = round128(sizeof(Mma) * kRows * kLd);
  static constexpr size_t q = 0, k = q + kTile, v = k + kTile, s = v + kTile;
  static constexpr size_t p = s + round128(sizeof(float) * kRows * kSLd);
  static constexpr size_t pv = p + round128(sizeof(Mma) * kRows * kPLd);
  static constexpr size_t stats = pv + (kTensorCores<Mma> ? round128(sizeof(float) * kRows * kOLd) : 0);
  static constexpr size_t bytes = stats + sizeof(float) * 4 * kRows;
};

// The row statistics take four threads a row: quarter q = threadIdx.x % 4 of row threadIdx.x / 4 (four
// consecutive lanes of a warp) reads columns q, q + 4, ... (with the tensor cores' padded score rows, a warp's
// 32 reads of one step fall in 32 banks), then two shuffles within the four combine the quarters.
constexpr int kRowLanes = kThreads / kRows;
static_assert(kRowLanes == 4, "four threads a row: two shuffles");

// Rows' new max m' over the tile's scores and alpha = exp(m - m') (1 for a row with no column in the tile,
// which then keeps its state: the reference skips it). max is exact in any order, so the quarters change
// nothing.
template <int kSLd>
__device__ __forceinline__ void row_max(const float* s, const float* m, float* m_new, float* alpha) {
  const int r = threadIdx.x / kRowLanes, q = threadIdx.x % kRowLanes;
  float mx = m[r];
  for (int c = q; c < kCols; c += kRowLanes) mx = fmaxf(mx, s[r * kSLd + c]);
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
  if (q != 0) return;
  m_new[r] = mx;
  alpha[r] = mx == -INFINITY ? 1.0f : expf(m[r] - mx);
}

// p_ij = exp(s_ij - m'_i) (0 where masked) into s, and dropped(p_ij) into the matmul tile p.
template <typename Mma, int kSLd, int kPLd>
__device__ __forceinline__ void probabilities(float* s, Mma* p, const float* m_new,
                                              const AttentionDropParams& drop, int bl, int h, int T, int i0,
                                              int j0) {
#pragma unroll 1
  for (int o = 0; o < kRows * kCols / kThreads; ++o) {
    const int r = owned_row<kCols>(o), c = owned_col<kCols>();
    const float x = s[r * kSLd + c];
    const float e = x == -INFINITY ? 0.0f : expf(x - m_new[r]);
    float kept = e;
    if (drop.active && e != 0.0f) kept = keeps(drop, bl, h, T, i0 + r, j0 + c) ? e * drop.scale : 0.0f;
    s[r * kSLd + c] = e;
    p[r * kPLd + c] = from_float<Mma>(kept);
  }
}

// l = fma(alpha, l, sum of the row's p), m = m'. fp32 (the reference's bits): one thread per row, the sum in
// column order. Tensor cores: the quarters' sums (each in column order) added pairwise, (q0 + q1) + (q2 + q3).
template <typename Mma, int kSLd>
__device__ __forceinline__ void row_sum(const float* s, float* m, const float* m_new, float* l,
                                        const float* alpha) {
  int r = threadIdx.x;
  float sum = 0.0f;
  if constexpr (kTensorCores<Mma>) {
    r = threadIdx.x / kRowLanes;
    const int q = threadIdx.x % kRowLanes;
    for (int c = q; c < kCols; c += kRowLanes) sum += s[r * kSLd + c];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    if (q != 0) return;
  } else {
    if (threadIdx.x >= kRows) return;
    for (int c = 0; c < kCols; ++c) sum += s[r * kSLd + c];
  }
  l[r] = fmaf(alpha[r], l[r], sum);
  m[r] = m_new[r];
}

template <typename Act, typename Mma, int kHs>
__global__ void __launch_bounds__(kThreads)
    flash_forward_kernel(Act* out, float* lse, const Act* qkv, Shape sh, int b0, AttentionDropParams drop) {
  using L = ForwardSmem<Mma, kHs>;
  extern __shared__ __align__(128) unsigned char smem[];
  Mma *q = reinterpret_cast<Mma*>(smem + L::q), *k = reinterpret_cast<Mma*>(smem + L::k);
  Mma *v = reinterpret_cast<Mma*>(smem + L::v), *p = reinterpret_cast<Mma*>(smem + L::p);
  float *s = reinterpret_cast<float*>(smem + L::s), *pv = reinterpret_cast<float*>(smem + L::pv);
  float *m = reinterpret_cast<float*>(smem + L::stats), *m_new = m + kRows, *l = m_new + kRows;
  float* alpha = l + kRows;
  const int i0 = blockIdx.x * kRows, h = blockIdx.y, bl = blockIdx.z, b = b0 + bl, T = sh.T;
  const int64_t C3 = 3 * int64_t(sh.C);
  const Act* base = qkv + int64_t(b) * T * C3 + int64_t(h) * kHs;
  load_rows<kHs>(q, L::kLd, base, C3, i0, T);
  if (threadIdx.x < kRows) m[threadIdx.x] = -INFINITY, l[threadIdx.x] = 0.0f;
  constexpr int kOwned = kRows * kHs / kThreads;
  float o_acc[kOwned];
#pragma unroll
  for (int o = 0; o < kOwned; ++o) o_acc[o] = 0.0f;
  for (int j0 = 0; j0 < min(i0 + kRows, T); j0 += kCols) {  // causal: no key tile past the last row
    __syncthreads();                                        // the previous key tile's k, v and p are consumed
    load_rows<kHs>(k, L::kLd, base + sh.C, C3, j0, T);
    load_rows<kHs>(v, L::kLd, base + 2 * int64_t(sh.C), C3, j0, T);
    __syncthreads();
    tile_product<Mma, kRows, kCols, kHs, Layout::kRow, Layout::kCol>(
        q, L::kLd, k, L::kLd, s, L::kSLd, [&](int, int r, int c, float dot) {
          const int i = i0 + r, j = j0 + c;
          s[r * L::kSLd + c] = j <= i && i < T ? sh.scale * dot : -INFINITY;  // j <= i < T: j < T
        });
    __syncthreads();
    row_max<L::kSLd>(s, m, m_new, alpha);
    __syncthreads();
    probabilities<Mma, L::kSLd, L::kPLd>(s, p, m_new, drop, bl, h, T, i0, j0);
    __syncthreads();
    row_sum<Mma, L::kSLd>(s, m, m_new, l, alpha);  // beside P V: both only read s and p
    tile_product<Mma, kRows, kHs, kCols, Layout::kRow, Layout::kRow>(
        p, L::kPLd, v, L::kLd, pv, L::kOLd,
        [&](int o, int r, int, float x) { o_acc[o] = fmaf(alpha[r], o_acc[o], x); });
  }
  __syncthreads();  // the rows' l are final
#pragma unroll
  for (int o = 0; o < kOwned; ++o) {
    const int r = owned_row<kHs>(o), i = i0 + r;
    if (i < T)
      out[(int64_t(b) * T + i) * sh.C + int64_t(h) * kHs + owned_col<kHs>()] =
          from_float<Act>(o_acc[o] * (1.0f / l[r]));
  }
  if (threadIdx.x < kRows && i0 + int(threadIdx.x) < T)
    lse[(int64_t(b) * sh.NH + h) * T + i0 + threadIdx.x] = m[threadIdx.x] + logf(l[threadIdx.x]);
}

// ---- backward ----

// Dr_i = dot(dout_i, out_i) of every row (b, h, i), an fma chain over the head's channels ascending.
template <typename Act>
__global__ void flash_row_dots_kernel(float* dr, const Act* dout, const Act* out, int B, int T, int C,
                                      int NH) {
  const int64_t rows = int64_t(B) * NH * T, hs = C / NH;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < rows;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t bh = idx / T, i = idx % T, b = bh / NH, h = bh % NH;
    const int64_t row = (b * T + i) * C + h * hs;
    float acc = 0.0f;
    for (int d = 0; d < hs; ++d) acc = fmaf(to_float(dout[row + d]), to_float(out[row + d]), acc);
    dr[idx] = acc;
  }
}

// The backward's shared memory: q, dout, k, v tiles, the scores s and dP (fp32), the dropped probabilities
// and dS as matmul inputs (on fp32 they overwrite s and dP in place, element by element, which keeps an
// hs = 128 block within sm_80's 163 KiB), WMMA's scratch for the [64, hs] products, the rows' lse and Dr.
template <typename Mma, int kHs>
struct BackwardSmem {
  static constexpr int kLd = input_ld<Mma, kHs>(), kSLd = f32_ld<Mma, kCols>(), kPLd = input_ld<Mma, kCols>();
  static constexpr int kOLd = kHs + 4;
  static constexpr size_t kTile = round128(sizeof(Mma) * kRows * kLd);
  static constexpr size_t kScores = round128(sizeof(float) * kRows * kSLd);
  static constexpr size_t kInputs = kTensorCores<Mma> ? round128(sizeof(Mma) * kRows * kPLd) : 0;
  static constexpr size_t q = 0, dout = q + kTile, k = dout + kTile, v = k + kTile, s = v + kTile;
  static constexpr size_t dp = s + kScores, pd = dp + kScores, ds = pd + kInputs, scratch = ds + kInputs;
  static constexpr size_t rows = scratch + (kTensorCores<Mma> ? round128(sizeof(float) * kRows * kOLd) : 0);
  static constexpr size_t bytes = rows + sizeof(float) * 2 * kRows;
};

// Every layout fits the opt-in dynamic shared memory of a block on sm_80 (163 KiB; sm_90 allows 227 KiB).
constexpr size_t kMaxSharedBytes = 163 * 1024;
template <typename Mma>
constexpr bool fits() {
  return ForwardSmem<Mma, 64>::bytes <= kMaxSharedBytes && ForwardSmem<Mma, 128>::bytes <= kMaxSharedBytes &&
         BackwardSmem<Mma, 64>::bytes <= kMaxSharedBytes && BackwardSmem<Mma, 128>::bytes <= kMaxSharedBytes;
}
static_assert(fits<float>() && fits<__half>() && fits<__nv_bfloat16>(),
              "a flash block exceeds sm_80's 163 KiB");

// WMMA's rules for the layouts: ldm a multiple of 8 for 16-bit inputs and of 4 for the fp32 stores, and every
// fragment pointer 32-byte aligned (fragments start at rows and columns that are multiples of 16, buffers at
// multiples of 128 bytes). fp32 overwrites s and dP with P and dS in place: the same row strides.
template <typename Mma, int kHs>
constexpr bool wmma_layout() {
  using L = BackwardSmem<Mma, kHs>;
  constexpr auto aligned = [](int ld, size_t bytes) {
    return 16 * ld * bytes % 32 == 0 && 16 * bytes % 32 == 0;
  };
  if constexpr (!kTensorCores<Mma>) return L::kPLd == L::kSLd;
  return L::kLd % 8 == 0 && L::kPLd % 8 == 0 && L::kSLd % 4 == 0 && L::kOLd % 4 == 0 &&
         aligned(L::kLd, sizeof(Mma)) && aligned(L::kPLd, sizeof(Mma)) && aligned(L::kSLd, 4) &&
         aligned(L::kOLd, 4);
}
static_assert(wmma_layout<float, 64>() && wmma_layout<float, 128>() && wmma_layout<__half, 64>() &&
                  wmma_layout<__half, 128>() && wmma_layout<__nv_bfloat16, 64>() &&
                  wmma_layout<__nv_bfloat16, 128>(),
              "a flash layout breaks WMMA's ldm or alignment rules");

// The tiles of one backward block, carved from shared memory.
template <typename Mma, int kHs>
struct BackwardTiles {
  using L = BackwardSmem<Mma, kHs>;
  Mma *q, *dout, *k, *v, *pd, *ds;
  float *s, *dp, *scratch, *lse, *dr;
  __device__ explicit BackwardTiles(unsigned char* smem)
      : q(reinterpret_cast<Mma*>(smem + L::q)),
        dout(reinterpret_cast<Mma*>(smem + L::dout)),
        k(reinterpret_cast<Mma*>(smem + L::k)),
        v(reinterpret_cast<Mma*>(smem + L::v)),
        pd(reinterpret_cast<Mma*>(smem + (kTensorCores<Mma> ? L::pd : L::s))),
        ds(reinterpret_cast<Mma*>(smem + (kTensorCores<Mma> ? L::ds : L::dp))),
        s(reinterpret_cast<float*>(smem + L::s)),
        dp(reinterpret_cast<float*>(smem + L::dp)),
        scratch(reinterpret_cast<float*>(smem + L::scratch)),
        lse(reinterpret_cast<float*>(smem + L::rows)),
        dr(lse + kRows) {}
};

// Which (sequence, head) and tiles a backward block works on.
struct BackwardAt {
  int bl, h, T, i0, j0;
};

// The rows i0.. of the query side: q and dout tiles, lse and Dr (rows at or past T: zeros).
template <typename Act, typename Mma, int kHs>
__device__ void load_query_side(const BackwardTiles<Mma, kHs>& t, const Act* q_base, const Act* dout_base,
                                const float* lse, const float* dr, const Shape& sh, int i0) {
  load_rows<kHs>(t.q, BackwardSmem<Mma, kHs>::kLd, q_base, 3 * int64_t(sh.C), i0, sh.T);
  load_rows<kHs>(t.dout, BackwardSmem<Mma, kHs>::kLd, dout_base, sh.C, i0, sh.T);
  if (threadIdx.x < kRows) {
    const int i = i0 + threadIdx.x;
    t.lse[threadIdx.x] = i < sh.T ? lse[i] : 0.0f;
    t.dr[threadIdx.x] = i < sh.T ? dr[i] : 0.0f;
  }
}

// S = scale q k^T and dP = dout v^T, then per element: p = exp(s - lse) (0 where masked), dropped(p) into pd
// (when kWantP) and ds = p (dropped(dP) - Dr) scale into ds, as the reference's backward_row computes them.
// Starts after a barrier that published the tiles; ends with one that publishes pd and ds.
template <bool kWantP, typename Mma, int kHs>
__device__ void gradient_scores(const BackwardTiles<Mma, kHs>& t, const Shape& sh,
                                const AttentionDropParams& drop, BackwardAt at) {
  using L = BackwardSmem<Mma, kHs>;
  tile_product<Mma, kRows, kCols, kHs, Layout::kRow, Layout::kCol>(
      t.q, L::kLd, t.k, L::kLd, t.s, L::kSLd,
      [&](int, int r, int c, float x) { t.s[r * L::kSLd + c] = sh.scale * x; });
  tile_product<Mma, kRows, kCols, kHs, Layout::kRow, Layout::kCol>(
      t.dout, L::kLd, t.v, L::kLd, t.dp, L::kSLd,
      [&](int, int r, int c, float x) { t.dp[r * L::kSLd + c] = x; });
  __syncthreads();
#pragma unroll 1
  for (int o = 0; o < kRows * kCols / kThreads; ++o) {
    const int r = owned_row<kCols>(o), c = owned_col<kCols>(), i = at.i0 + r, j = at.j0 + c;
    float pd = 0.0f, ds = 0.0f;
    if (j <= i && i < at.T) {
      const float p = expf(t.s[r * L::kSLd + c] - t.lse[r]);
      float dp = t.dp[r * L::kSLd + c];
      pd = p;
      if (drop.active) {
        const bool keep = keeps(drop, at.bl, at.h, at.T, i, j);
        pd = keep ? p * drop.scale : 0.0f;
        dp = keep ? dp * drop.scale : 0.0f;
      }
      ds = p * (dp - t.dr[r]) * sh.scale;
    }
    if constexpr (kWantP) t.pd[r * L::kPLd + c] = from_float<Mma>(pd);  // on fp32 this is s's element
    t.ds[r * L::kPLd + c] = from_float<Mma>(ds);                        // and this dP's
  }
  __syncthreads();
}

// dst[row j0 + r][channel c] = acc for the thread's elements of a [64, kHs] tile, rows below T: each
// element of dqkv belongs to one tile of one block, so the backward stores and nothing zeroes dqkv first.
template <int kHs, typename Act>
__device__ __forceinline__ void store_rows(Act* dst, int64_t stride, const float (&acc)[kRows * kHs / kThreads],
                                         int row0, int T) {
#pragma unroll
  for (int o = 0; o < kRows * kHs / kThreads; ++o) {
    const int row = row0 + owned_row<kHs>(o);
    if (row >= T) continue;
    Act* x = dst + int64_t(row) * stride + owned_col<kHs>();
    *x = from_float<Act>(acc[o]);
  }
}

// One key tile [j0, j0 + 64) of one (sequence, head): the query tiles from the one holding j0 ascending, each
// block's dV = dropped(P)^T dout and dK = dS^T q added to the tile's accumulators, then stored in dqkv.
template <typename Act, typename Mma, int kHs>
__global__ void __launch_bounds__(kThreads)
    flash_backward_kv_kernel(Act* dqkv, const float* dr, const Act* dout, const Act* qkv, const float* lse,
                             Shape sh, int b0, AttentionDropParams drop) {
  using L = BackwardSmem<Mma, kHs>;
  extern __shared__ __align__(128) unsigned char smem[];
  const BackwardTiles<Mma, kHs> t(smem);
  const int j0 = blockIdx.x * kCols, h = blockIdx.y, bl = blockIdx.z, b = b0 + bl, T = sh.T;
  const int64_t C3 = 3 * int64_t(sh.C), head = int64_t(h) * kHs, bh = int64_t(b) * sh.NH + h;
  const Act* q_base = qkv + int64_t(b) * T * C3 + head;
  load_rows<kHs>(t.k, L::kLd, q_base + sh.C, C3, j0, T);
  load_rows<kHs>(t.v, L::kLd, q_base + 2 * int64_t(sh.C), C3, j0, T);
  constexpr int kOwned = kCols * kHs / kThreads;
  float dk[kOwned], dv[kOwned];
#pragma unroll
  for (int o = 0; o < kOwned; ++o) dk[o] = dv[o] = 0.0f;
  for (int i0 = j0 / kRows * kRows; i0 < T; i0 += kRows) {
    __syncthreads();  // the previous query tile is consumed
    load_query_side(t, q_base, dout + int64_t(b) * T * sh.C + head, lse + bh * T, dr + bh * T, sh, i0);
    __syncthreads();
    gradient_scores<true>(t, sh, drop, BackwardAt{bl, h, T, i0, j0});
    tile_product<Mma, kCols, kHs, kRows, Layout::kCol, Layout::kRow>(
        t.pd, L::kPLd, t.dout, L::kLd, t.scratch, L::kOLd, [&](int o, int, int, float x) { dv[o] += x; });
    tile_product<Mma, kCols, kHs, kRows, Layout::kCol, Layout::kRow>(
        t.ds, L::kPLd, t.q, L::kLd, t.scratch, L::kOLd, [&](int o, int, int, float x) { dk[o] += x; });
  }
  Act* dk_base = dqkv + int64_t(b) * T * C3 + sh.C + head;
  store_rows<kHs>(dk_base, C3, dk, j0, T);
  store_rows<kHs>(dk_base + sh.C, C3, dv, j0, T);
}

// One query tile [i0, i0 + 64): the key tiles up to the diagonal ascending, each block's dQ = dS k added to
// the tile's accumulator, then stored in dqkv.
template <typename Act, typename Mma, int kHs>
__global__ void __launch_bounds__(kThreads)
    flash_backward_q_kernel(Act* dqkv, const float* dr, const Act* dout, const Act* qkv, const float* lse,
                            Shape sh, int b0, AttentionDropParams drop) {
  using L = BackwardSmem<Mma, kHs>;
  extern __shared__ __align__(128) unsigned char smem[];
  const BackwardTiles<Mma, kHs> t(smem);
  const int i0 = blockIdx.x * kRows, h = blockIdx.y, bl = blockIdx.z, b = b0 + bl, T = sh.T;
  const int64_t C3 = 3 * int64_t(sh.C), head = int64_t(h) * kHs, bh = int64_t(b) * sh.NH + h;
  const Act* q_base = qkv + int64_t(b) * T * C3 + head;
  load_query_side(t, q_base, dout + int64_t(b) * T * sh.C + head, lse + bh * T, dr + bh * T, sh, i0);
  constexpr int kOwned = kRows * kHs / kThreads;
  float dq[kOwned];
#pragma unroll
  for (int o = 0; o < kOwned; ++o) dq[o] = 0.0f;
  for (int j0 = 0; j0 < min(i0 + kRows, T); j0 += kCols) {
    __syncthreads();  // the previous key tile is consumed
    load_rows<kHs>(t.k, L::kLd, q_base + sh.C, C3, j0, T);
    load_rows<kHs>(t.v, L::kLd, q_base + 2 * int64_t(sh.C), C3, j0, T);
    __syncthreads();
    gradient_scores<false>(t, sh, drop, BackwardAt{bl, h, T, i0, j0});
    tile_product<Mma, kRows, kHs, kCols, Layout::kRow, Layout::kRow>(
        t.ds, L::kPLd, t.k, L::kLd, t.scratch, L::kOLd, [&](int o, int, int, float x) { dq[o] += x; });
  }
  store_rows<kHs>(dqkv + int64_t(b) * T * C3 + head, C3, dq, i0, T);
}

// ---- launchers ----

template <typename T>
struct Tag {
  using type = T;
};

// Calls f(std::integral_constant<int, hs>) for the compiled head sizes; throws CudaError for the others.
template <typename F>
void with_head_size(const char* op, int C, int NH, F&& f) {
  if (NH <= 0 || C <= 0 || C % NH != 0)
    throw CudaError(std::string(op) + ": C = " + std::to_string(C) +
                    " is not a positive multiple of NH = " + std::to_string(NH));
  const int hs = C / NH;
  if (hs == 64) {
    f(std::integral_constant<int, 64>{});
  } else if (hs == 128) {
    f(std::integral_constant<int, 128>{});
  } else {
    throw CudaError(std::string(op) + ": head size " + std::to_string(hs) +
                    " is not supported by the CUDA flash-attention kernels (head sizes 64 and 128 are)");
  }
}

// Calls f(Tag<Mma>) with the matmul input type: the activations' own half type, or for fp32 activations the
// context's GEMM inputs (bf16 or fp16 on tensor cores when asked, exact fp32 otherwise).
template <typename Act, typename F>
void with_mma(const Context& ctx, F&& f) {
  if constexpr (std::is_same_v<Act, float>) {
    if (ctx.fp32_gemm_compute() == CUBLAS_COMPUTE_32F_FAST_16BF) {
      f(Tag<__nv_bfloat16>{});
    } else if (ctx.fp32_gemm_compute() == CUBLAS_COMPUTE_32F_FAST_16F) {
      f(Tag<__half>{});
    } else {
      f(Tag<float>{});
    }
  } else {
    f(Tag<Act>{});
  }
}

template <typename Kernel>
void allow_shared_memory(Kernel* kernel, size_t bytes) {
  GPT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
}

int tiles_of(int T) {
  return (T + kRows - 1) / kRows;
}

Shape make_shape(int T, int C, int NH) {
  return Shape{T, C, NH, 1.0f / std::sqrt(float(C / NH))};
}

}  // namespace

template <typename Act>
void flash_attention_forward(const Context& ctx, Act* out, float* lse, const Act* qkv, int B, int T, int C,
                             int NH, const AttentionDropout* dropout) {
  with_head_size("flash_attention_forward", C, NH, [&](auto hs) {
    constexpr int kHs = decltype(hs)::value;
    if (B <= 0 || T <= 0) return;
    with_mma<Act>(ctx, [&](auto mma) {
      using Mma = typename decltype(mma)::type;
      auto* kernel = flash_forward_kernel<Act, Mma, kHs>;
      const size_t smem = ForwardSmem<Mma, kHs>::bytes;
      allow_shared_memory(kernel, smem);
      for_each_dropout_chunk("flash_attention_forward", B, dropout,
                             [&](int b0, int count, const AttentionDropParams& drop) {
                               kernel<<<dim3(tiles_of(T), NH, count), kThreads, smem, ctx.stream()>>>(
                                   out, lse, qkv, make_shape(T, C, NH), b0, drop);
                               GPT_CUDA_CHECK(cudaGetLastError());
                             });
    });
  });
}

template <typename Act>
void flash_attention_backward(const Context& ctx, Act* dqkv, const Act* dout, const Act* qkv, const Act* out,
                              const float* lse, int B, int T, int C, int NH, const AttentionDropout* dropout) {
  with_head_size("flash_attention_backward", C, NH, [&](auto hs) {
    constexpr int kHs = decltype(hs)::value;
    if (B <= 0 || T <= 0) return;
    StreamScratch row_dots(ctx, sizeof(float) * size_t(B) * NH * T);
    const int64_t rows = int64_t(B) * NH * T;
    flash_row_dots_kernel<Act><<<elementwise_blocks(rows, kThreads), kThreads, 0, ctx.stream()>>>(
        row_dots.as<float>(), dout, out, B, T, C, NH);
    GPT_CUDA_CHECK(cudaGetLastError());
    with_mma<Act>(ctx, [&](auto mma) {
      using Mma = typename decltype(mma)::type;
      auto* kv_kernel = flash_backward_kv_kernel<Act, Mma, kHs>;
      auto* q_kernel = flash_backward_q_kernel<Act, Mma, kHs>;
      const size_t smem = BackwardSmem<Mma, kHs>::bytes;
      allow_shared_memory(kv_kernel, smem);
      allow_shared_memory(q_kernel, smem);
      const Shape sh = make_shape(T, C, NH);
      for_each_dropout_chunk("flash_attention_backward", B, dropout,
                             [&](int b0, int count, const AttentionDropParams& drop) {
                               const dim3 grid(tiles_of(T), NH, count);
                               kv_kernel<<<grid, kThreads, smem, ctx.stream()>>>(
                                   dqkv, row_dots.as<float>(), dout, qkv, lse, sh, b0, drop);
                               GPT_CUDA_CHECK(cudaGetLastError());
                               q_kernel<<<grid, kThreads, smem, ctx.stream()>>>(dqkv, row_dots.as<float>(),
                                                                                dout, qkv, lse, sh, b0, drop);
                               GPT_CUDA_CHECK(cudaGetLastError());
                             });
    });
  });
}

#define GPT_FLASH_INSTANTIATE(Act)                                                                       \
  template void flash_attention_forward<Act>(const Context&, Act*, float*, const Act*, int, int, int, int, \
                                             const AttentionDropout*);                                     \
  template void flash_attention_backward<Act>(const Context&, Act*, const Act*, const Act*, const Act*,    \
                                              const float*, int, int, int, int, const AttentionDropout*);
GPT_FLASH_INSTANTIATE(float)
GPT_FLASH_INSTANTIATE(__half)
GPT_FLASH_INSTANTIATE(__nv_bfloat16)
#undef GPT_FLASH_INSTANTIATE

}  // namespace gpt::cuda
