// GELU forward and backward kernels (tanh approximation, as GPT-2), fp32 math on any storage type.
#include <cstdint>

#include "kernels/cuda/dtype.cuh"
#include "kernels/cuda/gelu.h"

namespace gpt::cuda {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;
constexpr int kThreads = 256;

__device__ __forceinline__ float gelu(float x) {
  const float inner = kSqrt2OverPi * (x + kCubic * x * x * x);
  return 0.5f * x * (1.0f + tanhf(inner));
}

// d/dx of 0.5 x (1 + tanh(u)), u = sqrt(2/pi)(x + 0.044715 x^3):
// 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) sqrt(2/pi) (1 + 3 * 0.044715 x^2).
__device__ __forceinline__ float gelu_grad(float x) {
  const float inner = kSqrt2OverPi * (x + kCubic * x * x * x);
  const float t = tanhf(inner);
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * kSqrt2OverPi * (1.0f + 3.0f * kCubic * x * x);
}

template <typename T>
__global__ void gelu_forward_kernel(T* out, const T* inp, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = from_float<T>(gelu(to_float(inp[i])));
  }
}

template <typename T>
__global__ void gelu_backward_kernel(T* dinp, const T* inp, const T* dout, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dinp[i] = from_float<T>(to_float(dinp[i]) + gelu_grad(to_float(inp[i])) * to_float(dout[i]));
  }
}

}  // namespace

template <typename T>
void gelu_forward(const Context& ctx, T* out, const T* inp, int64_t n) {
  if (n <= 0) return;
  gelu_forward_kernel<<<elementwise_blocks(n, kThreads), kThreads, 0, ctx.stream()>>>(out, inp, n);
  GPT_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void gelu_backward(const Context& ctx, T* dinp, const T* inp, const T* dout, int64_t n) {
  if (n <= 0) return;
  gelu_backward_kernel<<<elementwise_blocks(n, kThreads), kThreads, 0, ctx.stream()>>>(dinp, inp, dout, n);
  GPT_CUDA_CHECK(cudaGetLastError());
}

template void gelu_forward<float>(const Context&, float*, const float*, int64_t);
template void gelu_forward<__half>(const Context&, __half*, const __half*, int64_t);
template void gelu_forward<__nv_bfloat16>(const Context&, __nv_bfloat16*, const __nv_bfloat16*, int64_t);
template void gelu_backward<float>(const Context&, float*, const float*, const float*, int64_t);
template void gelu_backward<__half>(const Context&, __half*, const __half*, const __half*, int64_t);
template void gelu_backward<__nv_bfloat16>(const Context&, __nv_bfloat16*, const __nv_bfloat16*,
                                           const __nv_bfloat16*, int64_t);

}  // namespace gpt::cuda
