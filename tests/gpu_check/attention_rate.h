// The CUDA attention kernels' times at one shape: the flash kernels CudaOps runs (kernels/cuda/
// flash_attention.h, the log-sum-exp residual) beside the older T x T kernels of kernels/cuda/attention.h
// (the probabilities residual, batched GEMMs without dropout), forward and backward, with exact fp32 and with
// bf16 matmul inputs. What `equivalence --attention` prints (gpu_check: B=8, T=1024, C=768, NH=12).
#pragma once

#include <string>
#include <vector>

#include "kernels/cuda/cuda_ops.h"

namespace gpt::gpu_check {

struct AttentionTime {
  std::string kernel;     // "flash" or "t x t"
  std::string inputs;     // "fp32" (exact) or "bf16" (tensor cores, fp32 accumulation)
  double forward_ms = 0;  // per call, CUDA events over repeated calls after warm-up
  double backward_ms = 0;
};

// On fp32 tensors in device memory with random qkv and dout; restores fp32 matmul inputs on ops afterwards.
std::vector<AttentionTime> measure_attention_times(cuda::CudaOps& ops, int B, int T, int C, int NH);

}  // namespace gpt::gpu_check
