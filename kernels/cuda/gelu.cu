// GELU forward and backward kernels (tanh approximation, as GPT-2), fp32 math on any storage type. The
// per-element math is kernels/common/gelu_element.h, in the CPU kernel's operation order.
#include <cstdint>

#include "kernels/common/gelu_element.h"
#include "kernels/cuda/dtype.cuh"
#include "kernels/cuda/gelu.h"

namespace gpt::cuda {
namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void gelu_forward_kernel(T* out, const T* inp, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = from_float<T>(gpt::gelu::forward(to_float(inp[i])));
  }
}

template <typename T>
__global__ void gelu_backward_kernel(T* dinp, const T* inp, const T* dout, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dinp[i] = from_float<T>(to_float(dout[i]) * gpt::gelu::derivative(to_float(inp[i])));
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
