// FlashAttention-2 on the GPU: causal multi-head attention that keeps one log-sum-exp per row ([B,NH,T])
// for its backward instead of the [B,NH,T,T] probabilities, the CUDA twin of kernels/cpu/flash_attention.h
// (same tiles, kernels/common/flash_tiles.h, same summation order, same dropout masks). qkv [B,T,3C], out
// [B,T,C], dout and dqkv share one storage type Act (float, __half or __nv_bfloat16); lse [B,NH,T] is fp32
// whatever Act is (the seam's mixed-precision contract: a rounded log-sum-exp would scale all of a row's
// recomputed probabilities by one error); every value is computed in fp32 and each output rounded to Act
// once. The matmuls run on tensor cores (WMMA m16n16k16, fp32 accumulation; the forward's row sums then in
// four interleaved quarters) with bf16 or fp16 inputs when the activations are half, or when they are fp32
// and the context asks for bf16/fp16 GEMM inputs (Context::fp32_gemm_compute); otherwise as exact fp32 fma chains in the CPU reference's order (then the
// numbers differ from it only by expf/logf against std::exp/std::log). Head sizes 64 and 128; others throw
// CudaError. Device pointers (the dropout keys excepted: host); asynchronous on ctx.stream().
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/runtime.h"

namespace gpt::cuda {

// Whether the flash kernels take head size hs (they are compiled for these).
inline bool flash_head_size_supported(int hs) {
  return hs == 64 || hs == 128;
}

// Overwrites out [B,T,C] and lse [B,NH,T] (the log of the sum of exp of each row's scaled causal scores,
// before dropout). Dropout as attention_forward's (attention.h).
template <typename Act>
void flash_attention_forward(const Context& ctx, Act* out, float* lse, const Act* qkv, int B, int T, int C,
                             int NH, const AttentionDropout* dropout);

// Writes dqkv [B,T,3C] (overwrites: nothing need zero it first) given dout [B,T,C] and the forward's qkv, out
// and lse; dropout must be the forward's. Three kernels, no atomics: the rows' dot(dout, out), then dK and dV
// per key tile and dQ per query tile (each recomputing the probabilities), so every sum has a fixed order and
// reruns repeat bit for bit. Needs B*NH*T floats of temporary device memory (stream-ordered).
template <typename Act>
void flash_attention_backward(const Context& ctx, Act* dqkv, const Act* dout, const Act* qkv, const Act* out,
                              const float* lse, int B, int T, int C, int NH, const AttentionDropout* dropout);

}  // namespace gpt::cuda
