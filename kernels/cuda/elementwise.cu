// Element-wise kernels; see elementwise.h. Grid-stride loops; the conversions are tensor/half.h's.
#include <cstdint>

#include "kernels/cuda/elementwise.h"
#include "tensor/half.h"

namespace gpt::cuda {
namespace {

constexpr int kThreads = 256;

int blocks_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < 4096 ? (blocks > 0 ? blocks : 1) : 4096);
}

// Calls f(i) for every i < n.
template <typename F>
__global__ void for_each_kernel(int64_t n, F f) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    f(i);
  }
}

template <typename F>
void for_each(const Context& ctx, int64_t n, F f) {
  if (n == 0) return;
  for_each_kernel<<<blocks_for(n), kThreads, 0, ctx.stream()>>>(n, f);
  GPT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void fill_f32(const Context& ctx, float* out, float value, int64_t n) {
  for_each(ctx, n, [=] __device__(int64_t i) { out[i] = value; });
}

void add_f32(const Context& ctx, float* out, const float* a, const float* b, int64_t n) {
  for_each(ctx, n, [=] __device__(int64_t i) { out[i] = a[i] + b[i]; });
}

void add_into_f32(const Context& ctx, float* dst, const float* src, int64_t n) {
  for_each(ctx, n, [=] __device__(int64_t i) { dst[i] += src[i]; });
}

void f32_to_f16_scaled(const Context& ctx, uint16_t* dst, const float* src, float scale, int64_t n) {
  for_each(ctx, n, [=] __device__(int64_t i) { dst[i] = gpt::f32_to_f16(__fmul_rn(src[i], scale)); });
}

void f32_to_bf16_scaled(const Context& ctx, uint16_t* dst, const float* src, float scale, int64_t n) {
  for_each(ctx, n, [=] __device__(int64_t i) { dst[i] = gpt::f32_to_bf16(__fmul_rn(src[i], scale)); });
}

void f32_scaled(const Context& ctx, float* dst, const float* src, float scale, int64_t n) {
  for_each(ctx, n, [=] __device__(int64_t i) { dst[i] = __fmul_rn(src[i], scale); });
}

void f16_to_f32(const Context& ctx, float* dst, const uint16_t* src, int64_t n) {
  for_each(ctx, n, [=] __device__(int64_t i) { dst[i] = gpt::f16_to_f32(src[i]); });
}

void bf16_to_f32(const Context& ctx, float* dst, const uint16_t* src, int64_t n) {
  for_each(ctx, n, [=] __device__(int64_t i) { dst[i] = gpt::bf16_to_f32(src[i]); });
}

}  // namespace gpt::cuda
