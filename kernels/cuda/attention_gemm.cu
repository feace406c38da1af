// Causal attention without dropout as batched GEMMs on cuBLAS plus two small softmax kernels: the path
// attention.cu takes when no dropout mask is drawn (GPT-2 pretraining as llm.c runs it). Same layout, same
// att (the probabilities before dropout, zeros above the diagonal) and the same meaning as the handwritten
// kernels; the GEMMs run on the matrix units whenever the context asks for them (Context::fp32_gemm_compute:
// bf16 or fp16 inputs inside the GEMM with --bf16/--fp16, exact fp32 otherwise). The GEMMs are planned in
// kernels/common/attention_gemm_plan.h (the math and the column-major layout, tested on the host); one
// strided-batched call covers the heads of a sequence. The backward's dS needs [heads, T, T] of scratch: heads
// are taken in groups whose scratch stays under kScratchBytes. The full T x T products are computed (the
// masked half included); the softmax kernels zero what lies above the diagonal. Every sum runs in a fixed
// order, so reruns repeat bit for bit.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/common/attention_gemm_plan.h"
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

// The tensors a planned GEMM may name, on the device.
struct Tensors {
  const float* qkv = nullptr;
  float* out = nullptr;
  float* att = nullptr;
  const float* dout = nullptr;
  float* dqkv = nullptr;
  float* scratch = nullptr;
};

float* address(const Tensors& t, const AttentionOperand& operand) {
  switch (operand.tensor) {
    case AttentionTensor::kQkv:
      return const_cast<float*>(t.qkv) + operand.offset;
    case AttentionTensor::kOut:
      return t.out + operand.offset;
    case AttentionTensor::kAtt:
      return t.att + operand.offset;
    case AttentionTensor::kDout:
      return const_cast<float*>(t.dout) + operand.offset;
    case AttentionTensor::kDqkv:
      return t.dqkv + operand.offset;
    case AttentionTensor::kScratch:
      return t.scratch + operand.offset;
  }
  return nullptr;
}

// One strided-batched fp32 GEMM of the plan, in the context's compute type; where cuBLAS has none for fp32
// inputs rounded to fp16/bf16, in exact fp32 (as linear.cu's GEMMs fall back).
void run(const Context& ctx, const AttentionGemm& g, const Tensors& t) {
  const cublasOperation_t op_a = g.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = g.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  auto gemm = [&](cublasComputeType_t compute) {
    return cublasGemmStridedBatchedEx(ctx.cublas(), op_a, op_b, g.m, g.n, g.k, &g.alpha, address(t, g.a),
                                      CUDA_R_32F, g.a.ld, g.a.stride, address(t, g.b), CUDA_R_32F, g.b.ld,
                                      g.b.stride, &g.beta, address(t, g.c), CUDA_R_32F, g.c.ld, g.c.stride, g.batch,
                                      compute, CUBLAS_GEMM_DEFAULT);
  };
  cublasStatus_t status = gemm(ctx.fp32_gemm_compute());
  if (status == CUBLAS_STATUS_NOT_SUPPORTED && ctx.fp32_gemm_compute() != CUBLAS_COMPUTE_32F)
    status = gemm(CUBLAS_COMPUTE_32F);
  GPT_CUDA_CHECK(status);
}

}  // namespace

void attention_forward_gemm(const Context& ctx, float* out, float* att, const float* qkv, int B, int T, int C,
                            int NH) {
  const float scale = 1.0f / std::sqrt(float(C / NH));
  const Tensors tensors{qkv, out, att};
  for (int b = 0; b < B; ++b) {
    const std::array<AttentionGemm, 2> gemms = attention_forward_gemms(b, T, C, NH, scale);
    run(ctx, gemms[0], tensors);  // S = scale Q K^T
    causal_softmax(ctx, att + int64_t(b) * NH * T * T, int64_t(NH) * T, T);
    run(ctx, gemms[1], tensors);  // O = P V
  }
}

void attention_backward_gemm(const Context& ctx, float* dqkv, const float* dout, const float* qkv,
                             const float* att, int B, int T, int C, int NH) {
  const float scale = 1.0f / std::sqrt(float(C / NH));
  const size_t head_bytes = sizeof(float) * size_t(T) * T;
  const int group = int(std::max<size_t>(1, std::min<size_t>(NH, kScratchBytes / head_bytes)));
  StreamScratch scratch(ctx, head_bytes * group);
  const Tensors tensors{qkv, nullptr, const_cast<float*>(att), dout, dqkv, scratch.as<float>()};
  for (int b = 0; b < B; ++b) {
    for (int h0 = 0; h0 < NH; h0 += group) {
      const int heads = std::min(group, NH - h0);
      const std::array<AttentionGemm, 4> gemms = attention_backward_gemms(b, h0, heads, T, C, NH);
      run(ctx, gemms[0], tensors);  // dP = dO V^T
      run(ctx, gemms[1], tensors);  // dV += P^T dO
      causal_softmax_backward(ctx, tensors.scratch, att + (int64_t(b) * NH + h0) * T * T, int64_t(heads) * T, T,
                              scale);
      run(ctx, gemms[2], tensors);  // dQ += dS K
      run(ctx, gemms[3], tensors);  // dK += dS^T Q
    }
  }
}

}  // namespace gpt::cuda
