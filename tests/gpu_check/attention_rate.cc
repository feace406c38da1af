// The attention kernels' times; see attention_rate.h.
#include "tests/gpu_check/attention_rate.h"

#include <cstdint>
#include <functional>
#include <vector>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/flash_attention.h"
#include "tests/gpu_check/gemm_rate.h"
#include "tests/gpu_check/scratch.h"

namespace gpt::gpu_check {
namespace {

cuda::DeviceBuffer device_values(const cuda::Context& ctx, int64_t n, uint64_t seed) {
  const std::vector<float> v = normal_values(n, seed);
  cuda::DeviceBuffer buffer(n * sizeof(float));
  buffer.copy_from_host(ctx, v.data(), n * sizeof(float));
  return buffer;
}

// Milliseconds per call after two warm-up calls, over ten.
double time_ms(const cuda::Context& ctx, const std::function<void()>& f) {
  return ms_per_call(ctx, 2, 10, f);
}

}  // namespace

std::vector<AttentionTime> measure_attention_times(cuda::CudaOps& ops, int B, int T, int C, int NH) {
  const cuda::Context& ctx = ops.context();
  const int64_t BTC = int64_t(B) * T * C;
  const cuda::DeviceBuffer qkv = device_values(ctx, 3 * BTC, 1), dout = device_values(ctx, BTC, 2);
  const cuda::DeviceBuffer out(BTC * sizeof(float)), dqkv(3 * BTC * sizeof(float));
  const cuda::DeviceBuffer lse(int64_t(B) * NH * T * sizeof(float));
  const cuda::DeviceBuffer probs(int64_t(B) * NH * T * T * sizeof(float));
  float *o = out.as<float>(), *dq = dqkv.as<float>(), *l = lse.as<float>(), *p = probs.as<float>();
  const float *x = qkv.as<float>(), *dy = dout.as<float>();
  std::vector<AttentionTime> times;
  for (const DType inputs : {DType::kF32, DType::kBF16}) {
    ops.set_matmul_inputs(inputs);
    const char* name = inputs == DType::kF32 ? "fp32" : "bf16";
    AttentionTime flash{"flash", name};
    flash.forward_ms =
        time_ms(ctx, [&] { cuda::flash_attention_forward(ctx, o, l, x, B, T, C, NH, nullptr); });
    flash.backward_ms =
        time_ms(ctx, [&] { cuda::flash_attention_backward(ctx, dq, dy, x, o, l, B, T, C, NH, nullptr); });
    AttentionTime old{"t x t", name};
    old.forward_ms = time_ms(ctx, [&] { cuda::attention_forward(ctx, o, p, x, B, T, C, NH, nullptr); });
    old.backward_ms =
        time_ms(ctx, [&] { cuda::attention_backward(ctx, dq, dy, x, p, B, T, C, NH, nullptr); });
    times.push_back(flash);
    times.push_back(old);
  }
  ops.set_matmul_inputs(DType::kF32);
  return times;
}

}  // namespace gpt::gpu_check
