// The op-case table (kernels/cases) on the CPU backend: every case in fp32 within its tolerance of the fp64
// reference, at small sizes and at small versions of the shapes a real model meets; every forward/backward
// pair against finite differences; fp16 and bf16 tensors, which the CPU's layer ops do not take, reported as
// not supported, and taken by the CPU's reference of the mixed-precision contract (MixedPrecisionCpuOps)
// within the half tolerances; and a backend with one wrong op fails exactly that op's rows.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cases/op_cases.h"
#include "kernels/cases/run_case.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/flash_cpu_ops.h"
#include "kernels/cpu/mixed_precision_ops.h"

namespace gpt::cases {
namespace {

const std::vector<Sizes> kSmall = {
    Sizes{2, 16, 32, 4, 100},    // every dimension a vector multiple
    Sizes{3, 13, 18, 3, 77},     // odd: head size 6, T = 13, rows of 18 floats
    Sizes{2, 1, 32, 2, 130},     // T = 1
    Sizes{2, 8, 32, 4, 100, 1},  // every float tensor 4 bytes past a 16-byte boundary
};

TEST_CASE("every op case on the CPU in fp32 is within its tolerance of the fp64 reference") {
  for (const Sizes& s : kSmall) {
    for (const OpCase& c : op_cases(s)) {
      for (const Result& r : compare_to_reference(cpu_ops(), c, kFp32)) {
        INFO(s.describe() << ": " << r.op << " " << r.shape << " error " << r.error << " " << r.message);
        CHECK(r.verdict == Verdict::kPass);
      }
    }
  }
}

TEST_CASE("every backward of the table matches central finite differences in fp64") {
  for (const Sizes& s : kSmall) {
    for (const GradientCase& g : gradient_cases(s)) {
      for (const Result& r : check_gradient(cpu_ops(), g)) {
        INFO(s.describe() << ": " << r.op << " error " << r.error << " " << r.message);
        CHECK(r.verdict == Verdict::kPass);
      }
    }
  }
}

TEST_CASE("half-precision tensors the CPU's layer ops do not take are not supported, never passed") {
  for (const OpCase& c : op_cases(kSmall[0])) {
    for (const Variant& v : {kFp16, kBf16}) {
      const std::vector<Result> results = compare_to_reference(cpu_ops(), c, v);
      // Rounding fp32 state into a half copy is an engine op (cast), which CpuOps takes.
      if (c.op.rfind("adamw_with_copy", 0) == 0) {
        for (const Result& r : results) CHECK(r.verdict == Verdict::kPass);
        continue;
      }
      REQUIRE(results.size() == 1);
      INFO(c.op << " " << v.label << ": " << results[0].message);
      CHECK(results[0].verdict == Verdict::kUnsupported);
      CHECK(std::string(verdict_name(results[0].verdict)) == "not supported");
    }
  }
}

TEST_CASE("the CPU's reference of the mixed-precision contract computes every layer op in fp16 and bf16") {
  MixedPrecisionCpuOps mixed;
  int passed = 0;
  for (const Sizes& s : kSmall) {
    for (const OpCase& c : op_cases(s)) {
      for (const Variant& v : {kFp16, kBf16}) {
        for (const Result& r : compare_to_reference(mixed, c, v)) {
          INFO(s.describe() << ": " << r.op << " " << v.label << " error " << r.error << " " << r.message);
          // Only the engine's ops, which keep fp32 state (AdamW), stay outside the contract.
          if (r.verdict == Verdict::kUnsupported) {
            CHECK(r.op.rfind("adamw", 0) == 0);
          } else {
            CHECK(r.verdict == Verdict::kPass);
            ++passed;
          }
        }
      }
    }
  }
  CHECK(passed > 100);
}

TEST_CASE("the CPU's reference of the contract refuses the dtype mixes CUDA refuses, in one line") {
  MixedPrecisionCpuOps mixed;
  std::vector<uint16_t> x(8 * 4), w(4), b(4), out(8 * 4), mean16(8);
  std::vector<float> mean(8), rstd(8);
  auto half = [](std::vector<uint16_t>& v, std::vector<int64_t> shape) {
    return Tensor{v.data(), std::move(shape), DType::kBF16, Device::kCPU};
  };
  const Tensor rstd32{rstd.data(), {8}, DType::kF32, Device::kCPU};
  // LayerNorm's statistics are fp32 beside bf16 activations.
  try {
    mixed.layernorm_forward(half(out, {8, 4}), half(mean16, {8}), rstd32, half(x, {8, 4}), half(w, {4}),
                            half(b, {4}));
    FAIL("a bf16 mean was taken");
  } catch (const UnsupportedOp& e) {
    CHECK(std::string(e.what()).find("MixedPrecisionCpuOps::layernorm_forward: dtypes") != std::string::npos);
    CHECK(std::string(e.what()).find("mean bf16") != std::string::npos);
  }
  // fp32 activations with a bf16 weight: refused too, where CpuOps alone would read the bits as floats.
  std::vector<float> x32(8 * 4), out32(8 * 4);
  CHECK_THROWS_AS(mixed.layernorm_forward(Tensor{out32.data(), {8, 4}, DType::kF32, Device::kCPU},
                                          Tensor{mean.data(), {8}, DType::kF32, Device::kCPU}, rstd32,
                                          Tensor{x32.data(), {8, 4}, DType::kF32, Device::kCPU}, half(w, {4}),
                                          half(b, {4})),
                  UnsupportedOp);
}

// The CPU backend with GELU's forward off by one part in 1e4 on every value.
class SkewedGelu : public CpuOps {
 public:
  void gelu_forward(const Tensor& out, const Tensor& x) override {
    CpuOps::gelu_forward(out, x);
    std::vector<float> values(size_t(out.numel()));
    download(values.data(), out);
    for (float& v : values) v *= 1.0001f;
    upload(out, values.data());
  }
};

// n values scale * (-3 .. 3) in turn, and a host fp32 tensor over a vector.
std::vector<float> pattern(int64_t n, float scale) {
  std::vector<float> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = scale * float(int(i % 7) - 3);
  return v;
}
Tensor host_tensor(std::vector<float>& v, std::vector<int64_t> shape) {
  return Tensor{v.data(), std::move(shape), DType::kF32, Device::kCPU};
}

// The backward ops' contract (kernels/ops.h): an input gradient is overwritten, so the loop needs no zeroing
// pass before it (llm.c's rule); parameter gradients accumulate over micro-batches. Whatever dx held before
// makes no difference; what dw and db held is added to.
TEST_CASE("linear_backward and gelu_backward overwrite dx, and linear_backward accumulates dw and db") {
  const int64_t N = 5, C = 3, OC = 4;
  const auto tensor = host_tensor;
  std::vector<float> x = pattern(N * C, 0.5f), w = pattern(OC * C, 0.25f), dout = pattern(N * OC, 1.0f);
  struct Gradients {
    std::vector<float> dx, dw, db, dgelu;
  };
  auto backward = [&](float dx_start, float dw_start) {
    Gradients g{std::vector<float>(size_t(N * C), dx_start), std::vector<float>(size_t(OC * C), dw_start),
                std::vector<float>(size_t(OC), dw_start), std::vector<float>(size_t(N * OC), dx_start)};
    cpu_ops().linear_backward(tensor(g.dx, {N, C}), tensor(g.dw, {OC, C}), tensor(g.db, {OC}),
                              tensor(dout, {N, OC}), tensor(x, {N, C}), tensor(w, {OC, C}));
    cpu_ops().gelu_backward(tensor(g.dgelu, {N, OC}), tensor(dout, {N, OC}), tensor(dout, {N, OC}));
    return g;
  };
  const Gradients from_zero = backward(0.0f, 0.0f), from_garbage = backward(7.0f, 1.0f);
  CHECK(from_garbage.dx == from_zero.dx);
  CHECK(from_garbage.dgelu == from_zero.dgelu);
  for (size_t i = 0; i < from_zero.dw.size(); ++i) CHECK(from_garbage.dw[i] == from_zero.dw[i] + 1.0f);
  for (size_t i = 0; i < from_zero.db.size(); ++i) CHECK(from_garbage.db[i] == from_zero.db[i] + 1.0f);
}

TEST_CASE("attention_backward overwrites dqkv, keeping the probabilities or the log-sum-exp") {
  const int64_t B = 2, T = 5, C = 8, NH = 2;
  const auto tensor = host_tensor;
  FlashCpuOps flash;
  for (Ops* ops : {static_cast<Ops*>(&cpu_ops()), static_cast<Ops*>(&flash)}) {
    const bool lse = ops->attention_residual() == AttentionResidual::kLogSumExp;
    const std::vector<int64_t> att_shape =
        lse ? std::vector<int64_t>{B, NH, T} : std::vector<int64_t>{B, NH, T, T};
    std::vector<float> qkv = pattern(B * T * 3 * C, 0.1f), dout = pattern(B * T * C, 0.3f);
    std::vector<float> out(size_t(B * T * C)), att(size_t(lse ? B * NH * T : B * NH * T * T));
    ops->attention_forward(tensor(out, {B, T, C}), tensor(att, att_shape), tensor(qkv, {B, T, 3 * C}),
                           nullptr);
    auto backward = [&](float start) {
      std::vector<float> dqkv(size_t(B * T * 3 * C), start);
      ops->attention_backward(tensor(dqkv, {B, T, 3 * C}), tensor(dout, {B, T, C}),
                              tensor(qkv, {B, T, 3 * C}), tensor(out, {B, T, C}), tensor(att, att_shape),
                              nullptr);
      return dqkv;
    };
    INFO((lse ? "flash (log-sum-exp)" : "probabilities"));
    const std::vector<float> from_zero = backward(0.0f);
    CHECK(backward(7.0f) == from_zero);
    CHECK(std::any_of(from_zero.begin(), from_zero.end(), [](float g) { return g != 0.0f; }));
  }
}

TEST_CASE("a wrong op fails its own rows and no others") {
  SkewedGelu skewed;  // linear_gelu_forward's GELU is gelu_forward on the CPU: its output row fails too
  for (const OpCase& c : op_cases(kSmall[0])) {
    for (const Result& r : compare_to_reference(skewed, c, kFp32)) {
      INFO(r.op << " error " << r.error);
      CHECK((r.verdict == Verdict::kFail) ==
            (r.op == "gelu_forward out" || r.op == "linear_gelu_forward fc out"));
    }
  }
}

TEST_CASE("the timed mode reports a time, and GFLOP/s for the GEMMs") {
  for (const OpCase& c : op_cases(kSmall[0])) {
    if (c.op != "linear_forward fc" && c.op != "gelu_forward") continue;
    const Timing t = time_case(cpu_ops(), c, 3);
    CHECK(t.ms > 0);
    CHECK((t.gflops > 0) == (c.flops > 0));
  }
}

}  // namespace
}  // namespace gpt::cases
