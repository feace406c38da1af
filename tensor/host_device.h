// GPT_HOST_DEVICE marks small inline functions that both the CPU build (g++) and the CUDA build (nvcc)
// compile, so that the two backends share one definition of what they must compute identically (fp16
// rounding, quantization blocks, GELU).
#pragma once

#if defined(__CUDACC__)
#define GPT_HOST_DEVICE __host__ __device__
#else
#define GPT_HOST_DEVICE
#endif

// The same, always inlined: a per-element function called inside a CPU loop that must vectorize (an
// out-of-line call would stop it), and on the device inlined as any small helper.
#if defined(__CUDACC__)
#define GPT_HOST_DEVICE_INLINE __host__ __device__ __forceinline__
#else
#define GPT_HOST_DEVICE_INLINE __attribute__((always_inline)) inline
#endif
