// CudaOps against CpuOps on the loss and optimizer family: softmax cross-entropy (forward within fp32
// tolerance, backward bit for bit from the same probabilities), AdamW in both modes (within fp32 tolerance:
// the two compilers fuse multiply-adds differently) and its fused fp16/bf16 compute copy (bit for bit the
// rounding of tensor/half.h), sum (within double rounding), sum of squares (bit for bit: the CPU's chunk
// order), the finite check, and divide (bit for bit). Aligned and misaligned views take both the float4 and
// the scalar paths. Without a device it prints a SKIPPED: line and passes.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/common/adamw_element.h"
#include "kernels/cuda/adamw.h"
#include "tensor/half.h"
#include "tests/kernels_cuda/backends.h"

using gpt::testing::Backends;
using gpt::testing::have_device;
using gpt::testing::Pair;
using gpt::testing::random_values;

namespace {

// The view of t without its first element (4 bytes off the allocation's alignment: the scalar paths).
gpt::Tensor shifted(const gpt::Tensor& t) {
  gpt::Tensor v = t;
  v.data = static_cast<float*>(t.data) + 1;
  v.shape = {t.numel() - 1};
  return v;
}

// max over i of |got - want| / (|want| + atol).
double worst_error(const std::vector<float>& got, const std::vector<float>& want, double atol) {
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i)
    worst =
        std::max(worst, std::fabs(double(got[i]) - double(want[i])) / (std::fabs(double(want[i])) + atol));
  return worst;
}

// Targets on both backends (int32).
struct Targets {
  gpt::Tensor cpu, gpu;
};

Targets make_targets(Backends& b, int N, int V, uint32_t seed) {
  std::vector<int32_t> host(N);
  for (int n = 0; n < N; ++n) host[n] = int32_t((uint64_t(n) * 7919 + seed) % uint64_t(V));
  Pair shape = b.make(std::vector<float>(N), {N});
  Targets t{b.make_cpu_like(shape.cpu, gpt::DType::kI32), b.make_like(shape.gpu, gpt::DType::kI32)};
  b.cpu.upload(t.cpu, host.data());
  b.gpu.upload(t.gpu, host.data());
  return t;
}

void check_cross_entropy(int N, int V, int Vp, bool in_place) {
  CAPTURE(N);
  CAPTURE(V);
  CAPTURE(Vp);
  CAPTURE(in_place);
  Backends b;
  std::vector<float> logits = random_values(size_t(N) * Vp, 11);
  for (float& z : logits) z *= 4.0f;
  Pair z = b.make(logits, {N, Vp});
  Pair probs = in_place ? z : b.make(std::vector<float>(size_t(N) * Vp, 7.0f), {N, Vp});
  Pair losses = b.make(std::vector<float>(N), {N});
  const Targets targets = make_targets(b, N, V, 3);
  b.cpu.cross_entropy_forward(losses.cpu, probs.cpu, z.cpu, targets.cpu, V);
  b.gpu.cross_entropy_forward(losses.gpu, probs.gpu, z.gpu, targets.gpu, V);
  const std::vector<float> cpu_probs = b.host<float>(b.cpu, probs.cpu);
  const std::vector<float> gpu_probs = b.host<float>(b.gpu, probs.gpu);
  CHECK(worst_error(gpu_probs, cpu_probs, 1e-30) <= 1e-5);
  CHECK(worst_error(b.host<float>(b.gpu, losses.gpu), b.host<float>(b.cpu, losses.cpu), 1.0) <= 1e-5);
  for (int n = 0; n < N; ++n)
    for (int j = V; j < Vp; ++j) CHECK(gpu_probs[size_t(n) * Vp + j] == 0.0f);

  // Backward from the CPU's probabilities on both sides: the same roundings, so the same bits.
  b.gpu.upload(probs.gpu, cpu_probs.data());
  Pair dlosses = b.make(random_values(N, 12), {N});
  Pair dlogits = in_place ? probs : b.make(std::vector<float>(size_t(N) * Vp, 5.0f), {N, Vp});
  b.cpu.cross_entropy_backward(dlogits.cpu, probs.cpu, targets.cpu, dlosses.cpu, V);
  b.gpu.cross_entropy_backward(dlogits.gpu, probs.gpu, targets.gpu, dlosses.gpu, V);
  CHECK(b.host<float>(b.gpu, dlogits.gpu) == b.host<float>(b.cpu, dlogits.cpu));
}

}  // namespace

TEST_CASE("CudaOps cross-entropy agrees with CpuOps") {
  if (!have_device()) return;
  check_cross_entropy(37, 1000, 1024, false);   // float4 rows with a padded tail
  check_cross_entropy(37, 1000, 1024, true);    // probabilities over the logits
  check_cross_entropy(5, 50257, 50304, false);  // GPT-2's vocabulary
  check_cross_entropy(9, 50, 53, false);        // rows not 16-byte aligned: the scalar path
  check_cross_entropy(3, 7, 7, true);           // fewer columns than threads, no padding
}

TEST_CASE("CudaOps AdamW agrees with CpuOps in both modes, over aligned and misaligned ranges") {
  if (!have_device()) return;
  for (bool decoupled : {true, false})
    for (bool misaligned : {false, true}) {
      CAPTURE(decoupled);
      CAPTURE(misaligned);
      Backends b;
      const int64_t n = 100003;
      Pair param = b.make(random_values(n, 1), {n}), m = b.make(std::vector<float>(n), {n});
      Pair v = b.make(std::vector<float>(n), {n}), grad = b.make(random_values(n, 2), {n});
      auto view = [&](const gpt::Tensor& t) { return misaligned ? shifted(t) : t; };
      const gpt::AdamWHyper hyper{.lr = 1e-3, .weight_decay = 0.1, .decoupled = decoupled};
      for (int64_t step = 1; step <= 3; ++step) {
        b.cpu.adamw(view(param.cpu), view(grad.cpu), view(m.cpu), view(v.cpu), hyper, step, 0.5f);
        b.gpu.adamw(view(param.gpu), view(grad.gpu), view(m.gpu), view(v.gpu), hyper, step, 0.5f);
      }
      CHECK(worst_error(b.host<float>(b.gpu, m.gpu), b.host<float>(b.cpu, m.cpu), 1e-20) <= 1e-5);
      CHECK(worst_error(b.host<float>(b.gpu, v.gpu), b.host<float>(b.cpu, v.cpu), 1e-20) <= 1e-5);
      CHECK(worst_error(b.host<float>(b.gpu, param.gpu), b.host<float>(b.cpu, param.cpu), 1e-3) <= 1e-5);
    }
}

TEST_CASE("AdamW fused with the compute copy updates as adamw_f32 and rounds as tensor/half.h") {
  if (!have_device()) return;
  for (gpt::DType dtype : {gpt::DType::kF16, gpt::DType::kBF16})
    for (bool misaligned : {false, true}) {
      CAPTURE(misaligned);
      Backends b;
      const int64_t n = 4099;
      const std::vector<float> p0 = random_values(n, 3), g0 = random_values(n, 4);
      Pair plain = b.make(p0, {n}), fused = b.make(p0, {n}), grad = b.make(g0, {n});
      Pair m1 = b.make(std::vector<float>(n), {n}), v1 = b.make(std::vector<float>(n), {n});
      Pair m2 = b.make(std::vector<float>(n), {n}), v2 = b.make(std::vector<float>(n), {n});
      gpt::Tensor copy = b.make_like(plain.gpu, dtype);
      const int64_t offset = misaligned ? 1 : 0, len = n - offset;
      const gpt::AdamWHyper hyper{.lr = 1e-2, .weight_decay = 0.1};
      const auto c = gpt::adamw::constants(hyper, 2, 1.0f);
      const auto& ctx = b.gpu.context();
      gpt::cuda::adamw_f32(ctx, plain.gpu.as<float>() + offset, grad.gpu.as<float>() + offset,
                           m1.gpu.as<float>() + offset, v1.gpu.as<float>() + offset, len, c, true);
      gpt::cuda::adamw_f32_with_copy(ctx, fused.gpu.as<float>() + offset, grad.gpu.as<float>() + offset,
                                     m2.gpu.as<float>() + offset, v2.gpu.as<float>() + offset, len, c, true,
                                     copy.as<uint16_t>() + offset, dtype);
      const std::vector<float> updated = b.host<float>(b.gpu, fused.gpu);
      CHECK(updated == b.host<float>(b.gpu, plain.gpu));
      CHECK(b.host<float>(b.gpu, m2.gpu) == b.host<float>(b.gpu, m1.gpu));
      const std::vector<uint16_t> bits = b.host<uint16_t>(b.gpu, copy);
      int64_t mismatches = 0;
      for (int64_t i = offset; i < n; ++i) {
        const uint16_t want =
            dtype == gpt::DType::kF16 ? gpt::f32_to_f16(updated[i]) : gpt::f32_to_bf16(updated[i]);
        mismatches += bits[i] != want;
      }
      CHECK(mismatches == 0);
    }
}

TEST_CASE("CudaOps sum, sum of squares, the finite check and divide agree with CpuOps") {
  if (!have_device()) return;
  Backends b;
  for (int64_t n : {int64_t(1), int64_t(1000), int64_t(3 * 16384 + 5), int64_t(1000003)})
    for (bool misaligned : {false, true}) {
      if (misaligned && n < 2) continue;
      CAPTURE(n);
      CAPTURE(misaligned);
      Pair x = b.make(random_values(size_t(n), uint32_t(n)), {n});
      const gpt::Tensor xc = misaligned ? shifted(x.cpu) : x.cpu, xg = misaligned ? shifted(x.gpu) : x.gpu;
      const double cpu_sum = b.cpu.sum(xc), gpu_sum = b.gpu.sum(xg);
      CHECK(std::fabs(gpu_sum - cpu_sum) <= 1e-12 * (std::fabs(cpu_sum) + double(n)));
      CHECK(b.gpu.sum(xg) == gpu_sum);  // the same bits on a rerun
      CHECK(b.gpu.sum_of_squares(xg) == b.cpu.sum_of_squares(xc));
      CHECK(b.gpu.all_finite(xg));
      for (float divisor : {3.0f, 7.5f, 1e-3f}) {
        b.cpu.divide(xc, divisor);
        b.gpu.divide(xg, divisor);
      }
      CHECK(b.host<float>(b.gpu, x.gpu) == b.host<float>(b.cpu, x.cpu));
    }
}

TEST_CASE("CudaOps all_finite finds one inf or NaN anywhere") {
  if (!have_device()) return;
  Backends b;
  const int64_t n = 100003;
  const std::vector<float> clean = random_values(n, 6);
  for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()})
    for (int64_t at : {int64_t(0), int64_t(4097), n - 2, n - 1}) {
      CAPTURE(at);
      std::vector<float> values = clean;
      values[at] = bad;
      Pair x = b.make(values, {n});
      CHECK_FALSE(b.gpu.all_finite(x.gpu));
      CHECK(b.gpu.all_finite(shifted(x.gpu)) == (at == 0));
    }
}
