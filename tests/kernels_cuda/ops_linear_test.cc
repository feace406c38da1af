// CudaOps' linear layer (cuBLASLt GEMMs with the bias in the epilogue) against CpuOps in fp32: forward and
// the accumulating backward, with and without bias, over odd shapes that no tile divides, a bias that is not
// 16-byte aligned (the unfused path), and the fused GEMM + GELU launcher. fp32 with TF32 off must agree with
// the CPU within 1e-5 relative (normwise: the largest error over the largest reference value, since both sum
// in different orders and single elements near zero have no meaningful relative error). Without a device it
// prints a SKIPPED: line and passes.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cuda/linear.h"
#include "tests/kernels_cuda/backends.h"

using gpt::testing::Backends;
using gpt::testing::have_device;
using gpt::testing::Pair;
using gpt::testing::random_values;

namespace {

struct Shape {
  int64_t N, IC, OC;
};

// Shapes with every dimension odd or off the usual tile multiples, plus one of GPT-2's.
const Shape kShapes[] = {{1, 1, 1}, {7, 13, 5}, {33, 100, 257}, {130, 67, 129}, {64, 768, 96}};

double normwise_error(const std::vector<float>& cpu, const std::vector<float>& gpu) {
  double worst = 0, largest = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    worst = std::max(worst, std::fabs(double(cpu[i]) - double(gpu[i])));
    largest = std::max(largest, std::fabs(double(cpu[i])));
  }
  return largest > 0 ? worst / largest : worst;
}

void check_close(Backends& b, const char* what, const Pair& p, double tolerance = 1e-5) {
  const double error = normwise_error(b.host<float>(b.cpu, p.cpu), b.host<float>(b.gpu, p.gpu));
  INFO(what << ": normwise relative error " << error);
  CHECK(error <= tolerance);
}

// A view of t's values from the second element on: a pointer 4 bytes past a 64-byte boundary.
gpt::Tensor shifted_view(const gpt::Tensor& t, int64_t n) {
  gpt::Tensor view = t;
  view.data = static_cast<float*>(t.data) + 1;
  view.shape = {n};
  return view;
}

}  // namespace

TEST_CASE("CudaOps linear forward and backward match CpuOps in fp32, with and without bias") {
  if (!have_device()) return;
  Backends b;
  for (const Shape& s : kShapes) {
    for (bool with_bias : {true, false}) {
      CAPTURE(s.N);
      CAPTURE(s.IC);
      CAPTURE(s.OC);
      CAPTURE(with_bias);
      Pair x = b.make(random_values(s.N * s.IC, 1), {s.N, s.IC});
      Pair w = b.make(random_values(s.OC * s.IC, 2), {s.OC, s.IC});
      Pair bias = b.make(random_values(s.OC, 3), {s.OC});
      Pair out = b.make(std::vector<float>(s.N * s.OC, 7.0f), {s.N, s.OC});  // overwritten, not added to
      const gpt::Tensor no_bias;
      b.cpu.linear_forward(out.cpu, x.cpu, w.cpu, with_bias ? bias.cpu : no_bias);
      b.gpu.linear_forward(out.gpu, x.gpu, w.gpu, with_bias ? bias.gpu : no_bias);
      check_close(b, "forward out", out);

      // Non-zero starting gradients: the backward must add to them.
      Pair dout = b.make(random_values(s.N * s.OC, 4), {s.N, s.OC});
      Pair dx = b.make(random_values(s.N * s.IC, 5), {s.N, s.IC});
      Pair dw = b.make(random_values(s.OC * s.IC, 6), {s.OC, s.IC});
      Pair db = b.make(random_values(s.OC, 7), {s.OC});
      b.cpu.linear_backward(dx.cpu, dw.cpu, with_bias ? db.cpu : no_bias, dout.cpu, x.cpu, w.cpu);
      b.gpu.linear_backward(dx.gpu, dw.gpu, with_bias ? db.gpu : no_bias, dout.gpu, x.gpu, w.gpu);
      check_close(b, "backward dx", dx);
      check_close(b, "backward dw", dw);
      if (with_bias) check_close(b, "backward db", db);
    }
  }
}

TEST_CASE("CudaOps linear backward repeats bit for bit") {
  if (!have_device()) return;
  Backends b;
  const int64_t N = 1000, IC = 96, OC = 300;
  Pair x = b.make(random_values(N * IC, 1), {N, IC}), w = b.make(random_values(OC * IC, 2), {OC, IC});
  Pair dout = b.make(random_values(N * OC, 3), {N, OC});
  std::vector<float> first[3];
  for (int run = 0; run < 2; ++run) {
    Pair dx = b.make(random_values(N * IC, 4), {N, IC}), dw = b.make(random_values(OC * IC, 5), {OC, IC});
    Pair db = b.make(random_values(OC, 6), {OC});
    b.gpu.linear_backward(dx.gpu, dw.gpu, db.gpu, dout.gpu, x.gpu, w.gpu);
    const std::vector<float> now[3] = {b.host<float>(b.gpu, dx.gpu), b.host<float>(b.gpu, dw.gpu),
                                       b.host<float>(b.gpu, db.gpu)};
    for (int i = 0; i < 3; ++i) {
      if (run == 0) first[i] = now[i];
      CHECK(first[i] == now[i]);
    }
  }
}

TEST_CASE("a bias that is not 16-byte aligned takes the unfused path and agrees") {
  if (!have_device()) return;
  Backends b;
  const int64_t N = 37, IC = 40, OC = 24;
  Pair x = b.make(random_values(N * IC, 1), {N, IC}), w = b.make(random_values(OC * IC, 2), {OC, IC});
  Pair bias_storage = b.make(random_values(OC + 1, 3), {OC + 1});
  Pair out = b.make(std::vector<float>(N * OC), {N, OC});
  b.cpu.linear_forward(out.cpu, x.cpu, w.cpu, shifted_view(bias_storage.cpu, OC));
  b.gpu.linear_forward(out.gpu, x.gpu, w.gpu, shifted_view(bias_storage.gpu, OC));
  check_close(b, "forward out, shifted bias", out);
}

TEST_CASE("linear_gelu_forward matches linear then GELU on the CPU") {
  if (!have_device()) return;
  Backends b;
  // OC = 96 can fuse the pre-activation output (OC % 8 == 0); OC = 75 cannot and takes the unfused path.
  for (const Shape& s : {Shape{50, 72, 96}, Shape{33, 20, 75}}) {
    CAPTURE(s.OC);
    Pair x = b.make(random_values(s.N * s.IC, 1), {s.N, s.IC});
    Pair w = b.make(random_values(s.OC * s.IC, 2), {s.OC, s.IC});
    Pair bias = b.make(random_values(s.OC, 3), {s.OC});
    Pair pre = b.make(std::vector<float>(s.N * s.OC), {s.N, s.OC});
    Pair out = b.make(std::vector<float>(s.N * s.OC), {s.N, s.OC});
    b.cpu.linear_forward(pre.cpu, x.cpu, w.cpu, bias.cpu);
    b.cpu.gelu_forward(out.cpu, pre.cpu);
    gpt::cuda::linear_gelu_forward<float>(b.gpu.context(), out.gpu.as<float>(), pre.gpu.as<float>(),
                                          x.gpu.as<float>(), w.gpu.as<float>(), bias.gpu.as<float>(),
                                          int(s.N), int(s.IC), int(s.OC));
    check_close(b, "pre-activation", pre);
    // cuBLASLt's GELU evaluates tanh its own way: close to kernels/cpu/gelu.cc, not to the last bit.
    check_close(b, "GELU output", out, 1e-4);
  }
}
