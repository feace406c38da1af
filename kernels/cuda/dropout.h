// Dropout on the GPU (fp32, fp16, bf16), the CUDA side of kernels/cpu/dropout.h: element e of sequence b is
// kept when kernels/common/dropout_bits.h's keep rule says so for keys[b], and kept values are scaled by
// 1/(1-p) (rounded once to fp32), so masks and outputs equal the CPU's bit for bit. Device pointers for the
// data; asynchronous on ctx.stream().
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/runtime.h"

namespace gpt::cuda {

// out[b,e] = keep(keys[b], offset + e) ? x[b,e] * scale : 0 over [B, n]; keys is a HOST array of B keys,
// read before this returns (the keys travel in the kernels' parameters), so the caller may reuse it at once.
// offset is the global index of each row's first element (a slice of longer sequences). out may be x.
// p <= 0 copies (nothing when in place); p >= 1 zeroes. The backward is the same map applied to dout.
// T is float, __half or __nv_bfloat16 (a half value scaled in fp32, rounded once).
template <typename T>
void apply_dropout(const Context& ctx, T* out, const T* x, const uint64_t* keys, double p, int B, int64_t n,
                   int64_t offset = 0);

}  // namespace gpt::cuda
