// CudaOps, the CUDA backend of the device seam, against CpuOps where they must agree bit for bit: the casts
// (both round with tensor/half.h), add and add-into, sum of squares and the finite check. (GELU and linear,
// within fp32 tolerances, are op_cases_test's.) Tensors are allocated from arenas over each backend's memory,
// exactly as the engine does. Without a device it prints a SKIPPED: line and passes.
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "tests/kernels_cuda/backends.h"

using gpt::testing::Backends;
using gpt::testing::have_device;
using gpt::testing::Pair;
using gpt::testing::random_values;

TEST_CASE("CudaOps casts, adds and reduces exactly as CpuOps") {
  if (!have_device()) return;
  Backends b;
  const int64_t n = 100003;
  Pair x = b.make(random_values(n, 1), {n}), y = b.make(random_values(n, 2), {n});
  for (gpt::DType dtype : {gpt::DType::kF16, gpt::DType::kBF16}) {
    gpt::Tensor cpu_half = b.make_cpu_like(x.cpu, dtype), gpu_half = b.make_like(x.gpu, dtype);
    b.cpu.cast(cpu_half, x.cpu, 0.25f);
    b.gpu.cast(gpu_half, x.gpu, 0.25f);
    CHECK(b.host<uint16_t>(b.cpu, cpu_half) == b.host<uint16_t>(b.gpu, gpu_half));
    b.cpu.cast(y.cpu, cpu_half, 1.0f);
    b.gpu.cast(y.gpu, gpu_half, 1.0f);
    CHECK(b.host<float>(b.cpu, y.cpu) == b.host<float>(b.gpu, y.gpu));
  }
  b.cpu.add_into(x.cpu, y.cpu);
  b.gpu.add_into(x.gpu, y.gpu);
  CHECK(b.host<float>(b.cpu, x.cpu) == b.host<float>(b.gpu, x.gpu));
  CHECK(b.cpu.sum_of_squares(x.cpu) == b.gpu.sum_of_squares(x.gpu));
  CHECK(b.gpu.all_finite(x.gpu));
}
