// Reduction and division kernels (see reduce.h). The sums write one double per chunk into stream-ordered
// scratch (cudaMallocAsync), a single thread adds the chunk sums in chunk order, and one 8-byte download
// brings the result back; all_finite downloads one flag that any thread seeing a non-finite value sets.
#include <cstdint>

#include "kernels/cuda/dtype.cuh"
#include "kernels/cuda/reduce.h"

namespace gpt::cuda {
namespace {

constexpr int kThreads = 256;
constexpr unsigned kFullMask = 0xffffffffu;

// Sum over the block in a fixed tree (shuffles within warps, then the warps' sums likewise); valid in thread
// 0.
__device__ double block_sum(double s) {
  __shared__ double warps[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int offset = 16; offset > 0; offset /= 2) s += __shfl_down_sync(kFullMask, s, offset);
  if (lane == 0) warps[warp] = s;
  __syncthreads();
  s = 0;
  if (warp == 0) {
    s = lane < static_cast<int>(blockDim.x / 32) ? warps[lane] : 0.0;
    for (int offset = 16; offset > 0; offset /= 2) s += __shfl_down_sync(kFullMask, s, offset);
  }
  return s;
}

// Block c sums chunk c: thread t its values t, t + blockDim, ... in order, then block_sum.
__global__ void chunk_sums_kernel(const float* x, int64_t n, double* partial) {
  const int64_t begin = blockIdx.x * kReduceChunk;
  const int64_t end = begin + kReduceChunk < n ? begin + kReduceChunk : n;
  double s = 0;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) s += static_cast<double>(x[i]);
  s = block_sum(s);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__device__ __forceinline__ void add_squares(double& s, float4 v) {
  // v * v is exact in double (24-bit significands), so the FMA nvcc forms rounds exactly as the CPU's
  // separate multiply and add.
  s += static_cast<double>(v.x) * static_cast<double>(v.x);
  s += static_cast<double>(v.y) * static_cast<double>(v.y);
  s += static_cast<double>(v.z) * static_cast<double>(v.z);
  s += static_cast<double>(v.w) * static_cast<double>(v.w);
}

// Thread c sums the squares of chunk c in index order, as CpuOps::sum_of_squares does. kVec4 (x 16-byte
// aligned, so every chunk is): 32 values (one 128-byte line) per step, the next line's loads issued before
// the current line's additions so memory latency overlaps the serial chain of additions.
template <bool kVec4>
__global__ void chunk_squares_kernel(const float* x, int64_t n, int64_t chunks, double* partial) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= chunks) return;
  const int64_t begin = c * kReduceChunk;
  const int64_t len = begin + kReduceChunk < n ? kReduceChunk : n - begin;
  const float* chunk = x + begin;
  double s = 0;
  int64_t done = 0;
  if constexpr (kVec4) {
    constexpr int kLine = 8;  // float4 per step
    const float4* lines = reinterpret_cast<const float4*>(chunk);
    const int64_t steps = len / (4 * kLine);
    float4 current[kLine];
    if (steps > 0) {
#pragma unroll
      for (int k = 0; k < kLine; ++k) current[k] = lines[k];
    }
    for (int64_t step = 0; step < steps; ++step) {
      float4 next[kLine];
      const int64_t ahead = step + 1 < steps ? step + 1 : step;  // reload the current line on the last step
#pragma unroll
      for (int k = 0; k < kLine; ++k) next[k] = lines[ahead * kLine + k];
#pragma unroll
      for (int k = 0; k < kLine; ++k) add_squares(s, current[k]);
#pragma unroll
      for (int k = 0; k < kLine; ++k) current[k] = next[k];
    }
    done = steps * 4 * kLine;
  }
  for (int64_t i = done; i < len; ++i) s += static_cast<double>(chunk[i]) * static_cast<double>(chunk[i]);
  partial[c] = s;
}

// result = partial[0] + partial[1] + ... in chunk order (the CPU's final loop), by one thread.
__global__ void add_in_order_kernel(const double* partial, int64_t chunks, double* result) {
  double total = 0;
  for (int64_t c = 0; c < chunks; ++c) total += partial[c];
  *result = total;
}

__device__ __forceinline__ bool finite(float v) {
  return (__float_as_uint(v) & 0x7f800000u) != 0x7f800000u;
}

// Sets *flag when any value is not finite (every writer stores the same 1, so the result is deterministic).
template <bool kVec4>
__global__ void nonfinite_kernel(const float* x, int64_t n, int* flag) {
  const int64_t first = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  bool bad = false;
  int64_t done = 0;
  if constexpr (kVec4) {
    for (int64_t q = first; q < n / 4; q += stride) {
      const float4 v = reinterpret_cast<const float4*>(x)[q];
      bad |= !(finite(v.x) && finite(v.y) && finite(v.z) && finite(v.w));
    }
    done = 4 * (n / 4);
  }
  for (int64_t i = done + first; i < n; i += stride) bad |= !finite(x[i]);
  if (__any_sync(kFullMask, bad) && threadIdx.x % 32 == 0) *flag = 1;
}

// x[i] = x[i] / divisor, correctly rounded (__fdiv_rn: never an approximate reciprocal).
__global__ void divide_kernel(float* x, float divisor, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    x[i] = __fdiv_rn(x[i], divisor);
  }
}

int64_t chunk_count(int64_t n) {
  return (n + kReduceChunk - 1) / kReduceChunk;
}

// Adds partial[0..chunks) in order on the device and downloads the total.
double total_of(const Context& ctx, const StreamScratch& scratch, int64_t chunks) {
  double* partial = scratch.as<double>();
  add_in_order_kernel<<<1, 1, 0, ctx.stream()>>>(partial, chunks, partial + chunks);
  GPT_CUDA_CHECK(cudaGetLastError());
  return read_back(ctx, partial + chunks);
}

}  // namespace

double sum_f32(const Context& ctx, const float* x, int64_t n) {
  if (n <= 0) return 0.0;
  const int64_t chunks = chunk_count(n);
  const StreamScratch scratch(ctx, size_t(chunks + 1) * sizeof(double));
  chunk_sums_kernel<<<static_cast<unsigned>(chunks), kThreads, 0, ctx.stream()>>>(x, n, scratch.as<double>());
  GPT_CUDA_CHECK(cudaGetLastError());
  return total_of(ctx, scratch, chunks);
}

double sum_of_squares_f32(const Context& ctx, const float* x, int64_t n) {
  if (n <= 0) return 0.0;
  const int64_t chunks = chunk_count(n);
  const StreamScratch scratch(ctx, size_t(chunks + 1) * sizeof(double));
  constexpr int kChunksPerBlock = 64;  // few threads in all: spread them over the multiprocessors
  const unsigned blocks = static_cast<unsigned>((chunks + kChunksPerBlock - 1) / kChunksPerBlock);
  if (aligned16(x)) {
    chunk_squares_kernel<true>
        <<<blocks, kChunksPerBlock, 0, ctx.stream()>>>(x, n, chunks, scratch.as<double>());
  } else {
    chunk_squares_kernel<false>
        <<<blocks, kChunksPerBlock, 0, ctx.stream()>>>(x, n, chunks, scratch.as<double>());
  }
  GPT_CUDA_CHECK(cudaGetLastError());
  return total_of(ctx, scratch, chunks);
}

bool all_finite_f32(const Context& ctx, const float* x, int64_t n) {
  if (n <= 0) return true;
  const StreamScratch scratch(ctx, sizeof(int));
  int* flag = scratch.as<int>();
  GPT_CUDA_CHECK(cudaMemsetAsync(flag, 0, sizeof(int), ctx.stream()));
  if (aligned16(x)) {
    nonfinite_kernel<true>
        <<<elementwise_blocks((n + 3) / 4, kThreads), kThreads, 0, ctx.stream()>>>(x, n, flag);
  } else {
    nonfinite_kernel<false><<<elementwise_blocks(n, kThreads), kThreads, 0, ctx.stream()>>>(x, n, flag);
  }
  GPT_CUDA_CHECK(cudaGetLastError());
  return read_back(ctx, flag) == 0;
}

void divide_f32(const Context& ctx, float* x, float divisor, int64_t n) {
  if (n <= 0) return;
  divide_kernel<<<elementwise_blocks(n, kThreads), kThreads, 0, ctx.stream()>>>(x, divisor, n);
  GPT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace gpt::cuda
