// cuBLAS's GEMM rate on this GPU at GPT-2 124M's largest GEMMs, for MFU: the rate the training step's
// FLOPs are measured against besides the datasheet peak.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "kernels/cuda/runtime.h"

namespace gpt::gpu_check {

struct GemmRate {
  std::string precision;  // "fp32" (no TF32), "tf32", "fp16", "bf16" (fp32 accumulation)
  std::string layer;      // "fc", "lm_head"
  int m = 0, n = 0, k = 0;
  double tflops = 0;
};

// out[tokens, OC] = x[tokens, IC] w^T as the linear layers compute it, timed with CUDA events over repeated
// calls after warm-up, on random data.
std::vector<GemmRate> measure_gemm_rates(const cuda::Context& ctx, int tokens);

// Milliseconds per call of f on the context's stream: `warmups` calls, then `repeats` timed with CUDA events
// (the GEMM rates above, and attention_rate.h's kernels).
double ms_per_call(const cuda::Context& ctx, int warmups, int repeats, const std::function<void()>& f);

}  // namespace gpt::gpu_check
