// cuBLAS GEMM rates; see gemm_rate.h.
#include "tests/gpu_check/gemm_rate.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "tensor/half.h"
#include "tests/gpu_check/scratch.h"

namespace gpt::gpu_check {
namespace {

struct Precision {
  const char* name;
  cudaDataType_t type;  // of A, B and C
  cublasComputeType_t compute;
};
constexpr Precision kPrecisions[] = {
    {"fp32", CUDA_R_32F, CUBLAS_COMPUTE_32F_PEDANTIC},  // true fp32 whatever the math mode
    {"tf32", CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32},
    {"fp16", CUDA_R_16F, CUBLAS_COMPUTE_32F},
    {"bf16", CUDA_R_16BF, CUBLAS_COMPUTE_32F},
};

// Random values in the precision's storage type, in device memory.
cuda::DeviceBuffer random_matrix(const cuda::Context& ctx, int64_t n, cudaDataType_t type, uint64_t seed) {
  const std::vector<float> v = normal_values(n, seed);
  if (type == CUDA_R_32F) {
    cuda::DeviceBuffer buffer(n * sizeof(float));
    buffer.copy_from_host(ctx, v.data(), n * sizeof(float));
    return buffer;
  }
  std::vector<uint16_t> bits(n);
  if (type == CUDA_R_16F) {
    f32_to_f16(v.data(), bits.data(), n);
  } else {
    f32_to_bf16(v.data(), bits.data(), n);
  }
  cuda::DeviceBuffer buffer(n * sizeof(uint16_t));
  buffer.copy_from_host(ctx, bits.data(), n * sizeof(uint16_t));
  return buffer;
}

// TFLOP/s of out[n, m] = x[n, k] w[m, k]^T (row-major; column-major cuBLAS sees w^T x).
double time_gemm(const cuda::Context& ctx, const Precision& p, int m, int n, int k) {
  const cuda::DeviceBuffer w = random_matrix(ctx, int64_t(m) * k, p.type, 1);
  const cuda::DeviceBuffer x = random_matrix(ctx, int64_t(n) * k, p.type, 2);
  const cuda::DeviceBuffer out = random_matrix(ctx, int64_t(m) * n, p.type, 3);
  const float alpha = 1.0f, beta = 0.0f;
  auto gemm = [&] {
    GPT_CUDA_CHECK(cublasGemmEx(ctx.cublas(), CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, w.data(), p.type, k,
                                x.data(), p.type, k, &beta, out.data(), p.type, m, p.compute,
                                CUBLAS_GEMM_DEFAULT));
  };
  const double ms = ms_per_call(ctx, 3, 20, gemm);
  return 2.0 * m * double(n) * k / (ms * 1e-3) / 1e12;
}

}  // namespace

double ms_per_call(const cuda::Context& ctx, int warmups, int repeats, const std::function<void()>& f) {
  for (int i = 0; i < warmups; ++i) f();
  cudaEvent_t start, stop;
  GPT_CUDA_CHECK(cudaEventCreate(&start));
  GPT_CUDA_CHECK(cudaEventCreate(&stop));
  GPT_CUDA_CHECK(cudaEventRecord(start, ctx.stream()));
  for (int i = 0; i < repeats; ++i) f();
  GPT_CUDA_CHECK(cudaEventRecord(stop, ctx.stream()));
  GPT_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  GPT_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  GPT_CUDA_CHECK(cudaEventDestroy(start));
  GPT_CUDA_CHECK(cudaEventDestroy(stop));
  return ms / repeats;
}

std::vector<GemmRate> measure_gemm_rates(const cuda::Context& ctx, int tokens) {
  struct Layer {
    const char* name;
    int out_features, in_features;
  };
  const Layer layers[] = {{"fc", 3072, 768}, {"lm_head", 50304, 768}};
  std::vector<GemmRate> rates;
  for (const Precision& p : kPrecisions) {
    for (const Layer& l : layers) {
      rates.push_back({p.name, l.name, l.out_features, tokens, l.in_features,
                       time_gemm(ctx, p, l.out_features, tokens, l.in_features)});
    }
  }
  return rates;
}

}  // namespace gpt::gpu_check
