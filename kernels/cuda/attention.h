// Causal multi-head self-attention on the GPU, the CUDA side of kernels/cpu/attention.h with the same layout
// and meaning, in fp32. qkv is [B,T,3C] (q, k, v side by side, each split into NH heads of hs = C/NH
// channels); att [B,NH,T,T] receives the softmax probabilities of q k^T / sqrt(hs) under the causal mask
// (zeros above the diagonal), BEFORE dropout, exactly as the CPU keeps them for its backward; out [B,T,C] =
// dropout(att) v. Dropout's mask of probability (b, h, i, j) is dropout::keeps(keys[b], h*T*T + i*T + j),
// bit for bit the CPU's. Without dropout the forward and backward run as batched GEMMs on cuBLAS (any head
// size, on tensor cores when the context asks: attention_gemm.h); with dropout, on handwritten kernels (head
// sizes up to 128; GPT-2 uses 64). Device pointers (the keys excepted: host); asynchronous on ctx.stream();
// every reduction runs in a fixed order, so reruns repeat bit for bit. CudaOps' forward and backward run the
// flash kernels instead (flash_attention.h: no T x T residual); it keeps the decode here, and gpu_check times
// these forward and backward kernels beside flash (equivalence --attention).
#pragma once

#include <cstdint>

#include "kernels/cuda/runtime.h"

namespace gpt::cuda {

// Dropout of the attention probabilities: p and one key per sequence in HOST memory ([B]). The launchers
// copy the keys into the kernels' parameters by value, so the array may be reused as soon as a call
// returns. Null or p <= 0 is no dropout. Probability (h, i, j) is drawn at counter element_offset +
// h*T*T + i*T + j (a tensor-parallel rank whose heads start at h0 passes h0*T*T), as on the CPU.
struct AttentionDropout {
  double p = 0;
  const uint64_t* keys = nullptr;
  int64_t element_offset = 0;
};

// The largest head size the kernels take (their register tiles are sized for it at compile time).
inline constexpr int kMaxAttentionHeadSize = 128;

// Overwrites out [B,T,C] and att [B,NH,T,T].
void attention_forward(const Context& ctx, float* out, float* att, const float* qkv, int B, int T, int C,
                       int NH, const AttentionDropout* dropout);

// One decoding step (a key/value cache): out [C] is the output row of query n-1 against the keys and values
// of rows 0..n-1 of qkv [n,3C]; att [NH,n] receives its probabilities. No dropout (inference).
void attention_decode(const Context& ctx, float* out, float* att, const float* qkv, int n, int C, int NH);

// Accumulates into dqkv [B,T,3C] from dout [B,T,C] and the forward's qkv and att; dropout must be the
// forward's (the masks are regenerated, never stored). Needs B*NH*T floats of temporary device memory for
// the per-row sums of the softmax Jacobian, allocated and freed in stream order (cudaMallocAsync).
void attention_backward(const Context& ctx, float* dqkv, const float* dout, const float* qkv,
                        const float* att, int B, int T, int C, int NH, const AttentionDropout* dropout);

}  // namespace gpt::cuda
