// The element-wise steps around NCCL's reductions; see nccl_kernels.h. Grid-stride loops.
#include <cstdint>

#include "comm/nccl_kernels.h"
#include "tensor/half.h"

namespace gpt::comm::nccl_kernels {
namespace {

constexpr int kThreads = 256;

int blocks_for(size_t n) {
  const size_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < 4096 ? blocks : 4096);
}

// Calls f(i) for every i < n.
template <typename F>
__global__ void for_each_kernel(size_t n, F f) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    f(i);
  }
}

template <typename F>
cudaError_t for_each(size_t n, cudaStream_t stream, F f) {
  if (n == 0) return cudaSuccess;
  for_each_kernel<<<blocks_for(n), kThreads, 0, stream>>>(n, f);
  return cudaGetLastError();
}

}  // namespace

cudaError_t widen_scaled(const void* in, void* out, Wire wire, float scale, size_t n, cudaStream_t stream) {
  float* f32_out = static_cast<float*>(out);
  switch (wire) {
    case Wire::kF32: {
      const float* x = static_cast<const float*>(in);
      return for_each(n, stream, [=] __device__(size_t i) { f32_out[i] = __fmul_rn(x[i], scale); });
    }
    case Wire::kF16: {
      const uint16_t* x = static_cast<const uint16_t*>(in);
      return for_each(n, stream,
                      [=] __device__(size_t i) { f32_out[i] = __fmul_rn(gpt::f16_to_f32(x[i]), scale); });
    }
    case Wire::kBF16: {
      const uint16_t* x = static_cast<const uint16_t*>(in);
      return for_each(n, stream,
                      [=] __device__(size_t i) { f32_out[i] = __fmul_rn(gpt::bf16_to_f32(x[i]), scale); });
    }
    case Wire::kF64: {
      const double* x = static_cast<const double*>(in);
      double* y = static_cast<double*>(out);
      return for_each(n, stream, [=] __device__(size_t i) { y[i] = __dmul_rn(x[i], double(scale)); });
    }
  }
  return cudaErrorInvalidValue;
}

cudaError_t rescale_in_place(void* data, Wire wire, float scale, size_t n, cudaStream_t stream) {
  switch (wire) {
    case Wire::kF32:
    case Wire::kF64:
      return widen_scaled(data, data, wire, scale, n, stream);
    case Wire::kF16: {
      uint16_t* x = static_cast<uint16_t*>(data);
      return for_each(n, stream, [=] __device__(size_t i) {
        x[i] = gpt::f32_to_f16(__fmul_rn(gpt::f16_to_f32(x[i]), scale));
      });
    }
    case Wire::kBF16: {
      uint16_t* x = static_cast<uint16_t*>(data);
      return for_each(n, stream, [=] __device__(size_t i) {
        x[i] = gpt::f32_to_bf16(__fmul_rn(gpt::bf16_to_f32(x[i]), scale));
      });
    }
  }
  return cudaErrorInvalidValue;
}

}  // namespace gpt::comm::nccl_kernels
