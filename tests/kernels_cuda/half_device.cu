// Device side of half_device.h: kernels that run tensor/half.h's GPT_HOST_DEVICE functions on the GPU.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/cuda/runtime.h"
#include "tensor/half.h"
#include "tests/kernels_cuda/half_device.h"

namespace gpt::cuda::testing {
namespace {

struct Counters {
  unsigned long long mismatches;
  unsigned int first_mismatch;
};

__device__ bool is_nan_bits(uint32_t bits) {
  return (bits & 0x7fffffffu) > 0x7f800000u;
}

// Each thread checks a contiguous run of patterns starting at `base + index * per_thread`.
template <bool kBf16>
__global__ void compare_kernel(uint64_t base, uint32_t per_thread, Counters* counters) {
  const uint64_t start = base + (blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x) * per_thread;
  unsigned long long local = 0;
  uint32_t first = 0;
  for (uint32_t k = 0; k < per_thread; ++k) {
    const uint32_t bits = static_cast<uint32_t>(start + k);
    const float x = __uint_as_float(bits);
    uint16_t ours, hardware;
    bool ours_nan, hardware_nan;
    if constexpr (kBf16) {
      ours = gpt::f32_to_bf16(x);
      hardware = __bfloat16_as_ushort(__float2bfloat16_rn(x));
      ours_nan = (ours & 0x7fffu) > 0x7f80u;
      hardware_nan = (hardware & 0x7fffu) > 0x7f80u;
    } else {
      ours = gpt::f32_to_f16(x);
      hardware = __half_as_ushort(__float2half_rn(x));
      ours_nan = (ours & 0x7fffu) > 0x7c00u;
      hardware_nan = (hardware & 0x7fffu) > 0x7c00u;
    }
    const bool same = is_nan_bits(bits) ? (ours_nan && hardware_nan) : ours == hardware;
    if (!same && local++ == 0) first = bits;
  }
  if (local) {
    atomicAdd(&counters->mismatches, local);
    atomicExch(&counters->first_mismatch, first);
  }
}

template <bool kBf16>
HardwareComparison compare_all(const Context& ctx) {
  DeviceBuffer counters_buffer(sizeof(Counters));
  Counters* counters = counters_buffer.as<Counters>();
  constexpr uint32_t kPerThread = 64, kThreads = 256;
  constexpr uint64_t kPerLaunch = uint64_t{1} << 30;  // four launches cover 2^32
  for (uint64_t base = 0; base < (uint64_t{1} << 32); base += kPerLaunch) {
    const unsigned blocks = static_cast<unsigned>(kPerLaunch / (kPerThread * kThreads));
    compare_kernel<kBf16><<<blocks, kThreads, 0, ctx.stream()>>>(base, kPerThread, counters);
    GPT_CUDA_CHECK(cudaGetLastError());
  }
  Counters host{};
  counters_buffer.copy_to_host(ctx, &host, sizeof host);
  return HardwareComparison{uint64_t{1} << 32, host.mismatches, host.first_mismatch};
}

template <typename In, typename Out, typename Convert>
__global__ void map_kernel(const In* in, Out* out, int64_t n, Convert convert) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = convert(in[i]);
}

template <typename In, typename Out, typename Convert>
void map_on_device(const Context& ctx, const In* in, Out* out, int64_t n, Convert convert) {
  if (n <= 0) return;
  DeviceBuffer d_in(sizeof(In) * n), d_out(sizeof(Out) * n);
  d_in.copy_from_host(ctx, in, sizeof(In) * n);
  const unsigned blocks = static_cast<unsigned>((n + 255) / 256);
  map_kernel<<<blocks, 256, 0, ctx.stream()>>>(d_in.as<In>(), d_out.as<Out>(), n, convert);
  GPT_CUDA_CHECK(cudaGetLastError());
  d_out.copy_to_host(ctx, out, sizeof(Out) * n);
}

// Function objects rather than lambdas: a __device__ lambda would need nvcc's --extended-lambda.
struct ToF16 {
  __device__ uint16_t operator()(float x) const { return gpt::f32_to_f16(x); }
};
struct ToBf16 {
  __device__ uint16_t operator()(float x) const { return gpt::f32_to_bf16(x); }
};
struct FromF16 {
  __device__ float operator()(uint16_t h) const { return gpt::f16_to_f32(h); }
};
struct FromBf16 {
  __device__ float operator()(uint16_t b) const { return gpt::bf16_to_f32(b); }
};

}  // namespace

HardwareComparison compare_f32_to_f16_with_hardware(const Context& ctx) {
  return compare_all<false>(ctx);
}
HardwareComparison compare_f32_to_bf16_with_hardware(const Context& ctx) {
  return compare_all<true>(ctx);
}

void f32_to_f16_on_device(const Context& ctx, const float* in, uint16_t* out, int64_t n) {
  map_on_device(ctx, in, out, n, ToF16{});
}
void f32_to_bf16_on_device(const Context& ctx, const float* in, uint16_t* out, int64_t n) {
  map_on_device(ctx, in, out, n, ToBf16{});
}
void f16_to_f32_on_device(const Context& ctx, const uint16_t* in, float* out, int64_t n) {
  map_on_device(ctx, in, out, n, FromF16{});
}
void bf16_to_f32_on_device(const Context& ctx, const uint16_t* in, float* out, int64_t n) {
  map_on_device(ctx, in, out, n, FromBf16{});
}

}  // namespace gpt::cuda::testing
