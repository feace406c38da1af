// Device-side helpers shared by the .cu files: widening storage types to fp32 for arithmetic, rounding back
// (round to nearest even, as tensor/half.h does on the host), and the cuBLAS data type of each storage type.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <library_types.h>

#include <cstdint>
#include <type_traits>

namespace gpt::cuda {

__device__ __forceinline__ float to_float(float x) {
  return x;
}
__device__ __forceinline__ float to_float(__half x) {
  return __half2float(x);
}
__device__ __forceinline__ float to_float(__nv_bfloat16 x) {
  return __bfloat162float(x);
}

template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __half from_float<__half>(float x) {
  return __float2half_rn(x);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

template <typename T>
constexpr cudaDataType_t cuda_data_type();
template <>
constexpr cudaDataType_t cuda_data_type<float>() {
  return CUDA_R_32F;
}
template <>
constexpr cudaDataType_t cuda_data_type<__half>() {
  return CUDA_R_16F;
}
template <>
constexpr cudaDataType_t cuda_data_type<__nv_bfloat16>() {
  return CUDA_R_16BF;
}

// kVec consecutive floats, loaded or stored as one 16-byte access when kVec is 4 (the address must then be
// 16-byte aligned: see aligned16) and as a plain float when kVec is 1.
template <int kVec>
struct Vec {
  float v[kVec];
};

template <int kVec>
__device__ __forceinline__ Vec<kVec> load_vec(const float* p) {
  Vec<kVec> r;
  if constexpr (kVec == 4) {
    const float4 f = *reinterpret_cast<const float4*>(p);
    r.v[0] = f.x, r.v[1] = f.y, r.v[2] = f.z, r.v[3] = f.w;
  } else {
    r.v[0] = *p;
  }
  return r;
}

template <int kVec>
__device__ __forceinline__ void store_vec(float* p, const Vec<kVec>& r) {
  if constexpr (kVec == 4) {
    *reinterpret_cast<float4*>(p) = make_float4(r.v[0], r.v[1], r.v[2], r.v[3]);
  } else {
    *p = r.v[0];
  }
}

// kVec consecutive values of storage type T as fp32: load_vec for float, one widened value otherwise (the
// half kernels go element by element, kVec = 1).
template <int kVec, typename T>
__device__ __forceinline__ Vec<kVec> load_floats(const T* p) {
  if constexpr (std::is_same_v<T, float>) {
    return load_vec<kVec>(p);
  } else {
    static_assert(kVec == 1, "fp16/bf16 values load one at a time");
    return Vec<1>{{to_float(*p)}};
  }
}

template <int kVec, typename T>
__device__ __forceinline__ void store_floats(T* p, const Vec<kVec>& r) {
  if constexpr (std::is_same_v<T, float>) {
    store_vec(p, r);
  } else {
    static_assert(kVec == 1, "fp16/bf16 values store one at a time");
    *p = from_float<T>(r.v[0]);
  }
}

// Whether p allows 16-byte vector loads and stores.
inline bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// Blocks for a grid-stride elementwise loop: enough to fill the GPU, never more than the work needs.
inline unsigned elementwise_blocks(int64_t n, int threads) {
  const int64_t wanted = (n + threads - 1) / threads;
  return static_cast<unsigned>(wanted < 1 ? 1 : (wanted > 65535 ? 65535 : wanted));
}

}  // namespace gpt::cuda
