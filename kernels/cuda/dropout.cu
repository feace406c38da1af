// Dropout kernel; see dropout.h. The mask is never stored: each thread regenerates the keep bits of its
// elements from (keys[b], e) with the counter-based generator shared with the CPU (dropout_bits.h). The keys
// of up to kSequencesPerLaunch sequences travel by value in the kernel's parameters (one launch per group
// of sequences), which copies them at launch: no device buffer, and the host array is free when we return.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/common/dropout_bits.h"
#include "kernels/cuda/dropout.h"
#include "kernels/cuda/dtype.cuh"

namespace gpt::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kSequencesPerLaunch = 64;  // 512 bytes of keys in the parameters

struct SequenceKeys {
  uint64_t key[kSequencesPerLaunch];
};

// blockIdx.y picks the sequence; threads stride over its n elements kVec at a time (kVec = 4: 16-byte
// loads and stores, fp32 only). out may alias x: each element is read, then written, by the same thread. A
// half value is widened, scaled in fp32 and rounded once.
template <typename T, int kVec>
__global__ void dropout_kernel(T* out, const T* x, SequenceKeys keys, int64_t n, uint64_t counter0,
                               uint64_t threshold, float scale) {
  const uint64_t key = keys.key[blockIdx.y];
  const int64_t offset = int64_t(blockIdx.y) * n;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x * kVec;
  for (int64_t e = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * kVec; e < n; e += stride) {
    float v[kVec];
    if constexpr (kVec == 4) {
      const float4 f = *reinterpret_cast<const float4*>(x + offset + e);
      v[0] = f.x, v[1] = f.y, v[2] = f.z, v[3] = f.w;
    } else {
      v[0] = to_float(x[offset + e]);
    }
#pragma unroll
    for (int k = 0; k < kVec; ++k)
      v[k] = dropout::keeps(key, counter0 + uint64_t(e + k), threshold) ? v[k] * scale : 0.0f;
    if constexpr (kVec == 4) {
      *reinterpret_cast<float4*>(out + offset + e) = make_float4(v[0], v[1], v[2], v[3]);
    } else {
      out[offset + e] = from_float<T>(v[0]);
    }
  }
}

}  // namespace

template <typename T>
void apply_dropout(const Context& ctx, T* out, const T* x, const uint64_t* keys, double p, int B, int64_t n,
                   int64_t offset) {
  if (B <= 0 || n <= 0) return;
  if (p <= 0) {
    if (out != x)
      GPT_CUDA_CHECK(cudaMemcpyAsync(out, x, sizeof(T) * size_t(B) * size_t(n), cudaMemcpyDeviceToDevice,
                                     ctx.stream()));
    return;
  }
  if (keys == nullptr) throw CudaError("apply_dropout: p > 0 but no keys");
  const uint64_t threshold = dropout::threshold(p);
  const float scale = dropout::scale<float>(p);
  const uint64_t counter0 = uint64_t(offset);
  const bool vec4 = std::is_same_v<T, float> && n % 4 == 0 && aligned16(out) && aligned16(x);
  const int vec = vec4 ? 4 : 1;
  const unsigned blocks = elementwise_blocks((n + vec - 1) / vec, kThreads);
  for (int first = 0; first < B; first += kSequencesPerLaunch) {
    const int count = std::min(kSequencesPerLaunch, B - first);
    SequenceKeys group{};
    std::copy(keys + first, keys + first + count, group.key);
    const int64_t start = int64_t(first) * n;
    const dim3 grid(blocks, count);
    if constexpr (std::is_same_v<T, float>) {
      if (vec4) {
        dropout_kernel<T, 4><<<grid, kThreads, 0, ctx.stream()>>>(out + start, x + start, group, n, counter0,
                                                                  threshold, scale);
        GPT_CUDA_CHECK(cudaGetLastError());
        continue;
      }
    }
    dropout_kernel<T, 1>
        <<<grid, kThreads, 0, ctx.stream()>>>(out + start, x + start, group, n, counter0, threshold, scale);
    GPT_CUDA_CHECK(cudaGetLastError());
  }
}

template void apply_dropout<float>(const Context&, float*, const float*, const uint64_t*, double, int, int64_t,
                                   int64_t);
template void apply_dropout<__half>(const Context&, __half*, const __half*, const uint64_t*, double, int,
                                    int64_t, int64_t);
template void apply_dropout<__nv_bfloat16>(const Context&, __nv_bfloat16*, const __nv_bfloat16*,
                                           const uint64_t*, double, int, int64_t, int64_t);

}  // namespace gpt::cuda
