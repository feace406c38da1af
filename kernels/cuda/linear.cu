// Linear layer on the GPU: cuBLAS GEMMs (cublasGemmEx, fp32 compute) plus two small handwritten kernels, one
// that lays the bias into the output before the GEMM and one that sums dout's columns for the bias gradient.
//
// Row-major to column-major: cuBLAS sees a row-major [R, K] matrix as a column-major [K, R] one with the same
// pointer and leading dimension K. So out^T[OC,N] = W[OC,C] * inp^T[C,N] is GEMM(op(W) = transpose of the
// column-major [C,OC] view, inp as is), and likewise for the two backward products below.
#include <cstdint>

#include "kernels/cuda/dtype.cuh"
#include "kernels/cuda/linear.h"

namespace gpt::cuda {
namespace {

// out[n, oc] = bias[oc] for every row, so the GEMM can add its product with beta = 1: the sum of product
// and bias then happens in fp32 inside cuBLAS and is rounded once.
template <typename T>
__global__ void broadcast_rows_kernel(T* out, const T* bias, int64_t rows, int cols) {
  const int64_t total = rows * cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = bias[i % cols];
  }
}

// dbias[oc] += sum over n of dout[n, oc]. One block per 32 columns: threadIdx.x picks the column (coalesced
// reads along a row), threadIdx.y strides over rows, then a fixed-order tree sum in shared memory. No
// atomics, so the result does not depend on scheduling.
constexpr int kBiasColumns = 32;
constexpr int kBiasRowThreads = 16;

template <typename T>
__global__ void bias_gradient_kernel(float* dbias, const T* dout, int N, int OC) {
  __shared__ float partial[kBiasRowThreads][kBiasColumns];
  const int column = blockIdx.x * kBiasColumns + threadIdx.x;
  float sum = 0.0f;
  if (column < OC) {
    for (int row = threadIdx.y; row < N; row += kBiasRowThreads) {
      sum += to_float(dout[static_cast<int64_t>(row) * OC + column]);
    }
  }
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  for (int stride = kBiasRowThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.y < stride) partial[threadIdx.y][threadIdx.x] += partial[threadIdx.y + stride][threadIdx.x];
    __syncthreads();
  }
  if (threadIdx.y == 0 && column < OC) dbias[column] += partial[0][threadIdx.x];
}

// C = alpha * op(A) * op(B) + beta * C, column-major, fp32 accumulation; A and B of type T, C of type TC.
template <typename T, typename TC>
void gemm(const Context& ctx, cublasOperation_t op_a, cublasOperation_t op_b, int m, int n, int k, const T* a,
          int lda, const T* b, int ldb, float beta, TC* c, int ldc) {
  const float alpha = 1.0f;
  GPT_CUDA_CHECK(cublasGemmEx(ctx.cublas(), op_a, op_b, m, n, k, &alpha, a, cuda_data_type<T>(), lda, b,
                              cuda_data_type<T>(), ldb, &beta, c, cuda_data_type<TC>(), ldc,
                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void check_shape(const char* op, int N, int C, int OC) {
  if (N < 0 || C <= 0 || OC <= 0) {
    throw CudaError(std::string(op) + ": invalid shape N=" + std::to_string(N) + " C=" + std::to_string(C) +
                    " OC=" + std::to_string(OC) + " (C and OC must be positive, N not negative)");
  }
}

}  // namespace

template <typename T>
void linear_forward(const Context& ctx, T* out, const T* inp, const T* weight, const T* bias, int N, int C,
                    int OC) {
  check_shape("linear_forward", N, C, OC);
  if (N == 0) return;
  float beta = 0.0f;
  if (bias) {
    constexpr int kThreads = 256;
    const int64_t total = static_cast<int64_t>(N) * OC;
    broadcast_rows_kernel<<<elementwise_blocks(total, kThreads), kThreads, 0, ctx.stream()>>>(out, bias, N,
                                                                                              OC);
    GPT_CUDA_CHECK(cudaGetLastError());
    beta = 1.0f;
  }
  // out^T[OC,N] = (W viewed [C,OC])^T * (inp viewed [C,N]) + beta * out^T
  gemm(ctx, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, weight, C, inp, C, beta, out, OC);
}

template <typename T>
void linear_backward(const Context& ctx, T* dinp, float* dweight, float* dbias, const T* dout, const T* inp,
                     const T* weight, int N, int C, int OC) {
  check_shape("linear_backward", N, C, OC);
  if (N == 0) return;
  if (dinp) {
    // dinp^T[C,N] += (W viewed [C,OC]) * (dout viewed [OC,N])
    gemm(ctx, CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, weight, C, dout, OC, 1.0f, dinp, C);
  }
  // dweight^T[C,OC] += (inp viewed [C,N]) * (dout viewed [OC,N])^T, written as fp32
  gemm(ctx, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, inp, C, dout, OC, 1.0f, dweight, C);
  if (dbias) {
    const dim3 threads(kBiasColumns, kBiasRowThreads);
    const unsigned blocks = static_cast<unsigned>((OC + kBiasColumns - 1) / kBiasColumns);
    bias_gradient_kernel<<<blocks, threads, 0, ctx.stream()>>>(dbias, dout, N, OC);
    GPT_CUDA_CHECK(cudaGetLastError());
  }
}

#define GPT_INSTANTIATE_LINEAR(T)                                                                         \
  template void linear_forward<T>(const Context&, T*, const T*, const T*, const T*, int, int, int);       \
  template void linear_backward<T>(const Context&, T*, float*, float*, const T*, const T*, const T*, int, \
                                   int, int);
GPT_INSTANTIATE_LINEAR(float)
GPT_INSTANTIATE_LINEAR(__half)
GPT_INSTANTIATE_LINEAR(__nv_bfloat16)
#undef GPT_INSTANTIATE_LINEAR

}  // namespace gpt::cuda
