// Token + position embedding on the GPU (fp32; the whole table's forward also fp16/bf16), the CUDA side of
// kernels/cpu/embedding.h with the same layout: tokens [B,T] int32 in [0, V), wte [V,C], wpe [maxT,C],
// activations [B,T,C]. Device pointers; asynchronous on ctx.stream().
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/runtime.h"

namespace gpt::cuda {

// out[b,t,:] = wte[tokens[b,t], :] + wpe[t, :], in the storage type T (__half, __nv_bfloat16 or float: the
// sum in fp32, rounded once).
template <typename T>
void embedding_forward(const Context& ctx, T* out, const int32_t* tokens, const T* wte, const T* wpe, int B,
                       int T_, int C);

// Accumulates dwte[tokens[b,t], :] += dout[b,t,:] and dwpe[t,:] += dout[b,t,:], each element summed in
// increasing (b,t) order exactly as the CPU does, so the two backends agree bit for bit and reruns repeat.
// Either output may be null. vocab is dwte's row count V (it bounds the sort that groups repeated tokens).
// dout in its storage type D (float, __half or __nv_bfloat16), each value widened exactly: the sums are those
// of the widened values.
template <typename D>
void embedding_backward(const Context& ctx, float* dwte, float* dwpe, const D* dout, const int32_t* tokens,
                        int B, int T, int C, int vocab);

// The vocabulary-parallel forms (Ops::embedding_forward_rows / _backward_rows): wte [rows, C] holds rows
// [first, first + rows) of the table; tokens outside add nothing. wpe / dwpe may be null. The forward's
// bits are the CPU's (each output is one row, one position or their sum); the backward adds in the CPU's
// order, like embedding_backward.
// The forward in the storage type T, as embedding_forward.
template <typename T>
void embedding_forward_rows(const Context& ctx, T* out, const int32_t* tokens, const T* wte, int64_t first,
                            int64_t rows, const T* wpe, int B, int T_, int C);
template <typename D>
void embedding_backward_rows(const Context& ctx, float* dwte, int64_t first, int64_t rows, float* dwpe,
                             const D* dout, const int32_t* tokens, int B, int T, int C);

}  // namespace gpt::cuda
