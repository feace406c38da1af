// cuda_smoke: does the CUDA backend work on this machine? Without a usable GPU it says so in one line on
// stderr and exits 2, as gpt_train --device cuda does. With one it runs the linear layer (fp16, bf16, fp32;
// forward and backward) at GPT-2 124M's MLP shape and GELU on random data, compares each with a
// double-precision host reference, prints the errors, and exits 0 when all are within bounds, 1 when one is
// not (or the backend failed).
#include <cstdio>
#include <exception>
#include <vector>

#include "kernels/cuda/runtime.h"
#include "kernels/cuda/selfcheck.h"

int main() {
  const gpt::cuda::DeviceProbe probe = gpt::cuda::probe_devices();
  if (probe.count == 0) {
    std::fprintf(stderr, "cuda_smoke: no CUDA device is present (%s); the CUDA backend needs an NVIDIA GPU\n",
                 probe.problem.c_str());
    return 2;
  }
  try {
    gpt::cuda::Context ctx(0);
    std::printf("cuda_smoke: device 0 of %d: %s\n", probe.count, ctx.info().describe().c_str());
    // N = batch 4 x sequence 64 tokens; C -> OC as GPT-2 124M's MLP up-projection.
    const int N = 256, C = 768, OC = 3072;
    std::vector<gpt::cuda::Measurement> all;
    for (gpt::DType dtype : {gpt::DType::kF16, gpt::DType::kBF16, gpt::DType::kF32}) {
      for (auto& m : gpt::cuda::check_linear(ctx, dtype, N, C, OC, /*with_bias=*/true, 1234))
        all.push_back(m);
    }
    for (gpt::DType dtype : {gpt::DType::kF16, gpt::DType::kBF16, gpt::DType::kF32}) {
      for (auto& m : gpt::cuda::check_gelu(ctx, dtype, int64_t{N} * OC, 99)) all.push_back(m);
    }
    int failed = 0;
    for (const auto& m : all) {
      std::printf("  %s\n", m.describe().c_str());
      failed += !m.ok();
    }
    std::printf("cuda_smoke: %zu checks, %d failed\n", all.size(), failed);
    return failed ? 1 : 0;
  } catch (const std::exception& e) {
    std::printf("cuda_smoke: %s\n", e.what());
    return 1;
  }
}
