// The CUDA backend on a GPU: linear and GELU against double-precision references over dtypes and awkward
// shapes, the "+=" contract of the backward kernels, and tensor/half.h compiled by nvcc agreeing with the
// host and with the GPU's conversion instructions. Without a device every case prints a SKIPPED: line
// (counted by scripts/test) and passes, so `bazel test --config=cuda //...` works on GPU-less machines.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/runtime.h"
#include "kernels/cuda/selfcheck.h"
#include "tensor/arena.h"
#include "tensor/half.h"
#include "tests/kernels_cuda/half_device.h"
#include "tests/skip.h"

namespace {

// True when a device is usable; otherwise prints the SKIPPED: line for this test case.
bool have_device(const char* test) {
  const gpt::cuda::DeviceProbe probe = gpt::cuda::probe_devices();
  if (probe.count > 0) return true;
  gpt::testing::skipped("%s: no CUDA device is present (%s)", test, probe.problem.c_str());
  return false;
}

void check_all(const std::vector<gpt::cuda::Measurement>& measurements) {
  for (const auto& m : measurements) {
    INFO(m.describe());
    CHECK(m.ok());
  }
}

}  // namespace

TEST_CASE("linear forward and backward match the reference for every dtype and awkward shapes") {
  if (!have_device("linear vs reference")) return;
  gpt::cuda::Context ctx(0);
  struct Shape {
    int N, C, OC;
    bool bias;
  };
  for (gpt::DType dtype : {gpt::DType::kF32, gpt::DType::kF16, gpt::DType::kBF16}) {
    for (Shape s : {Shape{1, 1, 1, true}, Shape{3, 5, 7, true}, Shape{17, 33, 65, false},
                    Shape{64, 768, 2304, true}, Shape{130, 96, 50, true}}) {
      CAPTURE(s.N);
      CAPTURE(s.C);
      CAPTURE(s.OC);
      check_all(gpt::cuda::check_linear(ctx, dtype, s.N, s.C, s.OC, s.bias, 17));
    }
  }
}

TEST_CASE("GELU forward and backward match the reference") {
  if (!have_device("GELU vs reference")) return;
  gpt::cuda::Context ctx(0);
  for (gpt::DType dtype : {gpt::DType::kF32, gpt::DType::kF16, gpt::DType::kBF16}) {
    for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{1} << 20})
      check_all(gpt::cuda::check_gelu(ctx, dtype, n, 5));
  }
}

TEST_CASE(
    "tensor/half.h on the GPU agrees with the GPU's conversion instructions on all 2^32 fp32 patterns") {
  if (!have_device("half.h vs GPU instructions")) return;
  gpt::cuda::Context ctx(0);
  const auto f16 = gpt::cuda::testing::compare_f32_to_f16_with_hardware(ctx);
  INFO("first mismatching fp32 pattern: " << f16.first_mismatch);
  CHECK(f16.mismatches == 0);
  const auto bf16 = gpt::cuda::testing::compare_f32_to_bf16_with_hardware(ctx);
  INFO("first mismatching fp32 pattern: " << bf16.first_mismatch);
  CHECK(bf16.mismatches == 0);
}

TEST_CASE("tensor/half.h gives the same bits on the GPU as on the CPU") {
  if (!have_device("half.h device vs host")) return;
  gpt::cuda::Context ctx(0);
  std::vector<uint16_t> patterns(65536);
  for (uint32_t i = 0; i < 65536; ++i) patterns[i] = static_cast<uint16_t>(i);
  std::vector<float> from_device(65536);
  int bad = 0;
  gpt::cuda::testing::f16_to_f32_on_device(ctx, patterns.data(), from_device.data(), 65536);
  for (uint32_t i = 0; i < 65536; ++i)
    bad += gpt::bits_of(from_device[i]) != gpt::bits_of(gpt::f16_to_f32(patterns[i]));
  gpt::cuda::testing::bf16_to_f32_on_device(ctx, patterns.data(), from_device.data(), 65536);
  for (uint32_t i = 0; i < 65536; ++i) {
    bad += gpt::bits_of(from_device[i]) != gpt::bits_of(gpt::bf16_to_f32(patterns[i]));
  }
  CHECK(bad == 0);

  // A million fp32 patterns: random ones and every one near fp16's and bf16's range ends.
  std::mt19937 rng(3);
  std::vector<float> values;
  for (int i = 0; i < 1 << 20; ++i) values.push_back(gpt::float_of(static_cast<uint32_t>(rng())));
  for (uint32_t centre : {0x477fe000u, 0x38800000u, 0x33000000u, 0x7f7f8000u, 0x00800000u, 0x7f800000u}) {
    for (uint32_t d = 0; d < 4096; ++d) {
      values.push_back(gpt::float_of(centre - 2048 + d));
      values.push_back(gpt::float_of((centre - 2048 + d) | 0x80000000u));
    }
  }
  const int64_t n = static_cast<int64_t>(values.size());
  std::vector<uint16_t> device_bits(n);
  bad = 0;
  gpt::cuda::testing::f32_to_f16_on_device(ctx, values.data(), device_bits.data(), n);
  for (int64_t i = 0; i < n; ++i) bad += device_bits[i] != gpt::f32_to_f16(values[i]);
  gpt::cuda::testing::f32_to_bf16_on_device(ctx, values.data(), device_bits.data(), n);
  for (int64_t i = 0; i < n; ++i) bad += device_bits[i] != gpt::f32_to_bf16(values[i]);
  CHECK(bad == 0);
}

TEST_CASE("an arena over device memory accounts GPU buffers like host ones") {
  if (!have_device("device arena")) return;
  gpt::cuda::Context ctx(0);
  gpt::cuda::DeviceBlockSource source;
  gpt::Arena arena("cuda:0", gpt::Arena::kUnlimited, &source);
  gpt::Tensor w = arena.allocate_tensor("h0.mlp.fc.w", "compute weights", {3072, 768}, gpt::DType::kF16);
  CHECK(w.device == gpt::Device::kCUDA);
  CHECK(arena.current_bytes() == 3072 * 768 * 2);
  std::vector<uint16_t> back(16, 0xffff);
  CHECK(cudaMemcpy(back.data(), w.data, 32, cudaMemcpyDeviceToHost) == cudaSuccess);
  for (uint16_t v : back) CHECK(v == 0);  // zero-filled
  arena.release(w.data);
  CHECK(arena.current_bytes() == 0);
}

TEST_CASE("a Context for a device that does not exist names the problem") {
  const gpt::cuda::DeviceProbe probe = gpt::cuda::probe_devices();
  try {
    gpt::cuda::Context ctx(probe.count);  // one past the last device, or device 0 when there is none
    FAIL("expected CudaError");
  } catch (const gpt::cuda::CudaError& e) {
    const std::string message = e.what();
    CHECK((message.find("does not exist") != std::string::npos ||
           message.find("no CUDA device is present") != std::string::npos));
  }
}
