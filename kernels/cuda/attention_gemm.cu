// Causal attention without dropout as batched GEMMs on cuBLAS plus two small softmax kernels: the path
// attention.cu takes when no dropout mask is drawn (GPT-2 pretraining as llm.c runs it). Same layout, same
// att (the probabilities before dropout, zeros above the diagonal) and the same meaning as the handwritten
// kernels; the GEMMs run on the matrix units whenever the context asks for them (Context::fp32_gemm_compute:
// bf16 or fp16 inputs inside the GEMM with --bf16/--fp16, exact fp32 otherwise).
//
// Per sequence b and head h, with hs = C/NH and row-major Q, K, V [T, hs] (rows 3C apart in qkv), dO and O
// [T, hs] (rows C apart), P [T, T]:
//   forward:  S = scale Q K^T;  P = causal_softmax(S) (in att);  O = P V
//   backward: dP = dO V^T;  dV += P^T dO;  dS = P * (dP - rowsum(P * dP)) * scale;  dQ += dS K;  dK += dS^T Q
// cuBLAS is column-major: a row-major matrix X with rows ld apart is the column-major X^T with leading
// dimension ld, so each product above is written as its transpose (the comments at each call). One
// strided-batched GEMM covers the heads of a sequence (consecutive heads are hs columns apart in qkv, T*T
// apart in att), one call per sequence. The backward's dS needs [heads, T, T] of scratch: heads are taken in
// groups whose scratch stays under kScratchBytes. The full T x T products are computed (the masked half
// included); the softmax kernels zero what lies above the diagonal. Every sum runs in a fixed order, so
// reruns repeat bit for bit.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/attention_gemm.h"

namespace gpt::cuda {
namespace {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kWarpsPerBlock = 8;
constexpr size_t kScratchBytes = size_t(64) << 20;

__device__ __forceinline__ float warp_max(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, offset));
  return v;
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

// In place over rows of [rows, T] scores (row r is query r % T of its sequence and head): columns j <= i
// become softmax probabilities, the others 0. One warp per row, lane l holding columns l, l + 32, ... in
// registers (kPerLane of them: T <= 32 kPerLane), so the row is read once (its causal part only) and written
// once.
template <int kPerLane>
__global__ void causal_softmax_kernel(float* att, int64_t rows, int T) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = threadIdx.x % 32, i = static_cast<int>(row % T);
  float* p = att + row * T;
  float v[kPerLane];
  float m = -INFINITY;
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {
    const int j = lane + 32 * k;
    v[k] = j <= i ? p[j] : -INFINITY;
    m = fmaxf(m, v[k]);
  }
  m = warp_max(m);
  float sum = 0.0f;
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {
    v[k] = lane + 32 * k <= i ? expf(v[k] - m) : 0.0f;
    sum += v[k];
  }
  const float inverse = 1.0f / warp_sum(sum);
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {
    const int j = lane + 32 * k;
    if (j < T) p[j] = v[k] * inverse;
  }
}

// In place: dp [rows, T] holds dP and becomes dS = P * (dP - sum_j P dP) * scale (0 above the diagonal),
// with P the forward's probabilities [rows, T]. One warp per row, kPerLane columns per lane in registers.
template <int kPerLane>
__global__ void causal_softmax_backward_kernel(float* dp, const float* att, int64_t rows, int T, float scale) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = threadIdx.x % 32, i = static_cast<int>(row % T);
  float* d = dp + row * T;
  const float* p = att + row * T;
  float pv[kPerLane], dv[kPerLane];
  float dot = 0.0f;
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {
    const int j = lane + 32 * k;
    pv[k] = j <= i ? p[j] : 0.0f;
    dv[k] = j <= i ? d[j] : 0.0f;
    dot = fmaf(pv[k], dv[k], dot);
  }
  dot = warp_sum(dot);
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {
    const int j = lane + 32 * k;
    if (j < T) d[j] = pv[k] * (dv[k] - dot) * scale;
  }
}

// Longer rows: the same math over the row in three passes (max, sum, write) with nothing kept in registers.
__global__ void causal_softmax_long_kernel(float* att, int64_t rows, int T) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = threadIdx.x % 32, i = static_cast<int>(row % T);
  float* p = att + row * T;
  float m = -INFINITY;
  for (int j = lane; j <= i; j += 32) m = fmaxf(m, p[j]);
  m = warp_max(m);
  float sum = 0.0f;
  for (int j = lane; j <= i; j += 32) sum += expf(p[j] - m);
  const float inverse = 1.0f / warp_sum(sum);
  for (int j = lane; j < T; j += 32) p[j] = j <= i ? expf(p[j] - m) * inverse : 0.0f;
}

__global__ void causal_softmax_backward_long_kernel(float* dp, const float* att, int64_t rows, int T,
                                                    float scale) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = threadIdx.x % 32, i = static_cast<int>(row % T);
  float* d = dp + row * T;
  const float* p = att + row * T;
  float dot = 0.0f;
  for (int j = lane; j <= i; j += 32) dot = fmaf(p[j], d[j], dot);
  dot = warp_sum(dot);
  for (int j = lane; j < T; j += 32) d[j] = j <= i ? p[j] * (d[j] - dot) * scale : 0.0f;
}

unsigned row_blocks(int64_t rows) {
  return static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
}

// Calls f(std::integral_constant<int, kPerLane>) with the fewest registers per lane that hold a row of T
// (a power of two up to 32: T <= 1024), or f(std::integral_constant<int, 0>) for longer rows.
template <typename F>
void with_row_registers(int T, F&& f) {
  if (T <= 32) return f(std::integral_constant<int, 1>{});
  if (T <= 64) return f(std::integral_constant<int, 2>{});
  if (T <= 128) return f(std::integral_constant<int, 4>{});
  if (T <= 256) return f(std::integral_constant<int, 8>{});
  if (T <= 512) return f(std::integral_constant<int, 16>{});
  if (T <= 1024) return f(std::integral_constant<int, 32>{});
  f(std::integral_constant<int, 0>{});
}

void causal_softmax(const Context& ctx, float* att, int64_t rows, int T) {
  with_row_registers(T, [&](auto per_lane) {
    constexpr int kPerLane = decltype(per_lane)::value;
    if constexpr (kPerLane > 0) {
      causal_softmax_kernel<kPerLane><<<row_blocks(rows), kWarpsPerBlock * 32, 0, ctx.stream()>>>(att, rows, T);
    } else {
      causal_softmax_long_kernel<<<row_blocks(rows), kWarpsPerBlock * 32, 0, ctx.stream()>>>(att, rows, T);
    }
  });
  GPT_CUDA_CHECK(cudaGetLastError());
}

void causal_softmax_backward(const Context& ctx, float* dp, const float* att, int64_t rows, int T,
                             float scale) {
  with_row_registers(T, [&](auto per_lane) {
    constexpr int kPerLane = decltype(per_lane)::value;
    const unsigned blocks = row_blocks(rows);
    if constexpr (kPerLane > 0) {
      causal_softmax_backward_kernel<kPerLane><<<blocks, kWarpsPerBlock * 32, 0, ctx.stream()>>>(dp, att, rows, T,
                                                                                                scale);
    } else {
      causal_softmax_backward_long_kernel<<<blocks, kWarpsPerBlock * 32, 0, ctx.stream()>>>(dp, att, rows, T, scale);
    }
  });
  GPT_CUDA_CHECK(cudaGetLastError());
}

// One strided-batched fp32 GEMM, C = alpha op(A) op(B) + beta C, column-major, over `batch` heads.
struct HeadGemm {
  cublasOperation_t op_a = CUBLAS_OP_N, op_b = CUBLAS_OP_N;
  int m = 0, n = 0, k = 0;
  const float* a = nullptr;
  int lda = 0;
  int64_t stride_a = 0;
  const float* b = nullptr;
  int ldb = 0;
  int64_t stride_b = 0;
  float* c = nullptr;
  int ldc = 0;
  int64_t stride_c = 0;
  float alpha = 1.0f, beta = 0.0f;
  int batch = 0;
};

void run(const Context& ctx, const HeadGemm& g) {
  GPT_CUDA_CHECK(cublasGemmStridedBatchedEx(ctx.cublas(), g.op_a, g.op_b, g.m, g.n, g.k, &g.alpha, g.a, CUDA_R_32F,
                                            g.lda, g.stride_a, g.b, CUDA_R_32F, g.ldb, g.stride_b, &g.beta, g.c,
                                            CUDA_R_32F, g.ldc, g.stride_c, g.batch, ctx.fp32_gemm_compute(),
                                            CUBLAS_GEMM_DEFAULT));
}

// X [T, T] row-major = alpha * L R^T for row-major L, R [T, hs] with rows ld_l and ld_r apart, over `heads`
// heads (hs columns apart in L and R, T*T apart in X). Column-major: X^T = alpha (R^cm)^T L^cm.
void scores(const Context& ctx, float* x, const float* l, int ld_l, const float* r, int ld_r, int T, int hs,
            int heads, float alpha) {
  HeadGemm g;
  g.op_a = CUBLAS_OP_T, g.op_b = CUBLAS_OP_N;
  g.m = T, g.n = T, g.k = hs;
  g.a = r, g.lda = ld_r, g.stride_a = hs;
  g.b = l, g.ldb = ld_l, g.stride_b = hs;
  g.c = x, g.ldc = T, g.stride_c = int64_t(T) * T;
  g.alpha = alpha, g.batch = heads;
  run(ctx, g);
}

// Y [T, hs] (rows ld_y apart) = X Z + beta Y for row-major X [T, T] (or X^T when transpose_x) and Z [T, hs]
// (rows ld_z apart). Column-major: Y^cm = Z^cm (X^cm), X^cm = X^T as stored, so X is op_b = T and X^T op_b = N.
void times_values(const Context& ctx, float* y, int ld_y, const float* x, bool transpose_x, const float* z,
                  int ld_z, int T, int hs, int heads, float beta) {
  HeadGemm g;
  g.op_a = CUBLAS_OP_N, g.op_b = transpose_x ? CUBLAS_OP_T : CUBLAS_OP_N;
  g.m = hs, g.n = T, g.k = T;
  g.a = z, g.lda = ld_z, g.stride_a = hs;
  g.b = x, g.ldb = T, g.stride_b = int64_t(T) * T;
  g.c = y, g.ldc = ld_y, g.stride_c = hs;
  g.beta = beta, g.batch = heads;
  run(ctx, g);
}

}  // namespace

void attention_forward_gemm(const Context& ctx, float* out, float* att, const float* qkv, int B, int T, int C,
                            int NH) {
  const int hs = C / NH, ld = 3 * C;
  const float scale = 1.0f / std::sqrt(float(hs));
  for (int b = 0; b < B; ++b) {
    const float* q = qkv + int64_t(b) * T * ld;
    float* p = att + int64_t(b) * NH * T * T;
    scores(ctx, p, q, ld, q + C, ld, T, hs, NH, scale);  // S = scale Q K^T
    const int64_t rows = int64_t(NH) * T;
    causal_softmax(ctx, p, rows, T);
    // O = P V: Y = X Z with X = P as stored (transpose_x = false reads it as P, see times_values).
    times_values(ctx, out + int64_t(b) * T * C, C, p, false, q + 2 * C, ld, T, hs, NH, 0.0f);
  }
}

void attention_backward_gemm(const Context& ctx, float* dqkv, const float* dout, const float* qkv,
                             const float* att, int B, int T, int C, int NH) {
  const int hs = C / NH, ld = 3 * C;
  const float scale = 1.0f / std::sqrt(float(hs));
  const size_t head_bytes = sizeof(float) * size_t(T) * T;
  const int group = int(std::max<size_t>(1, std::min<size_t>(NH, kScratchBytes / head_bytes)));
  StreamScratch scratch(ctx, head_bytes * group);
  float* ds = scratch.as<float>();
  for (int b = 0; b < B; ++b) {
    for (int h0 = 0; h0 < NH; h0 += group) {
      const int heads = std::min(group, NH - h0);
      const int64_t column = int64_t(b) * T * ld + int64_t(h0) * hs;
      const float *q = qkv + column, *k = q + C, *v = q + 2 * C;
      float *dq = dqkv + column, *dk = dq + C, *dv = dq + 2 * C;
      const float* d_o = dout + int64_t(b) * T * C + int64_t(h0) * hs;
      const float* p = att + (int64_t(b) * NH + h0) * T * T;
      scores(ctx, ds, d_o, C, v, ld, T, hs, heads, 1.0f);  // dP = dO V^T
      times_values(ctx, dv, ld, p, true, d_o, C, T, hs, heads, 1.0f);  // dV += P^T dO
      const int64_t rows = int64_t(heads) * T;
      causal_softmax_backward(ctx, ds, p, rows, T, scale);
      times_values(ctx, dq, ld, ds, false, k, ld, T, hs, heads, 1.0f);  // dQ += dS K
      times_values(ctx, dk, ld, ds, true, q, ld, T, hs, heads, 1.0f);   // dK += dS^T Q
    }
  }
}

}  // namespace gpt::cuda
