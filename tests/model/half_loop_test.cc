// The half layer loop (LayerLoop with compute dtype fp16 or bf16) on the CPU's reference of the ops'
// mixed-precision contract (MixedPrecisionCpuOps): activations and weights in the half dtype, parameter
// gradients and the loss in fp32. Two accumulated micro-steps with dropout on, at each recomputation and with
// the fused head, follow the fp32 loop on the same weights within the half dtype's rounding; the
// activations take half the bytes apart from the fp32 statistics; checkpoints in host memory round-trip.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/mixed_precision_ops.h"
#include "model/loop.h"
#include "model/model.h"
#include "tensor/half.h"
#include "tests/kernels/check.h"
#include "tests/model/flat_model.h"

namespace {

using gpt::test::expect_relative;

constexpr int kB = 2;

// The flat weights rounded to a half dtype, as a ZeRO engine's compute weights are; fp32 gradients.
class HalfSlices final : public gpt::WeightSource<float>, public gpt::GradientSink<float> {
 public:
  HalfSlices(const gpt::ParamTable& table, const std::vector<float>& weights, gpt::DType half)
      : grads(table.total, 0.0f), table_(table), half_(half), bits_(weights.size()) {
    if (half == gpt::DType::kBF16) {
      gpt::f32_to_bf16(weights.data(), bits_.data(), int64_t(weights.size()));
    } else {
      gpt::f32_to_f16(weights.data(), bits_.data(), int64_t(weights.size()));
    }
  }
  void begin_pass(gpt::Pass, const std::vector<int>&) override {}
  gpt::WeightView acquire(int unit) override { return {bits_.data() + table_.units[unit].offset, half_}; }
  void release(int) override {}
  float* open(int unit) override { return grads.data() + table_.units[unit].offset; }
  void ready(int) override {}

  std::vector<float> grads;

 private:
  const gpt::ParamTable& table_;
  gpt::DType half_;
  std::vector<uint16_t> bits_;
};

std::vector<float> initial_weights(const gpt::GPTConfig& config) {
  gpt::GPT2<float> init(config, kB);
  init.init(11);
  return init.params;
}

struct Run {
  std::vector<float> losses, grads;
};

// Two micro-steps with dropout, gradients accumulated; source and sink are `slices`.
template <typename Slices>
Run train(gpt::LayerLoop<float>& loop, Slices& slices, const gpt::GPTConfig& config) {
  Run r;
  for (int step = 0; step < 2; ++step) {
    const int n = kB * config.seq_len;
    const std::vector<int32_t> x = gpt::test::lcg_tokens(n, config.vocab, 3 + step),
                               y = gpt::test::lcg_tokens(n, config.vocab, 13 + step);
    std::vector<int64_t> windows{2 * step, 2 * step + 1};
    r.losses.push_back(
        loop.forward(slices, x.data(), y.data(), gpt::Dropout{0.1, 0.1, 5, windows.data()}, true));
    loop.backward(slices, slices, 0.5f);
  }
  r.grads = slices.grads;
  return r;
}

Run fp32_run(const gpt::GPTConfig& config, const gpt::Recompute& recompute) {
  gpt::Arena arena;
  gpt::LayerLoop<float> loop(config, kB, recompute, gpt::cpu_ops(), arena);
  gpt::test::FlatSlices slices(loop.table(), initial_weights(config));
  return train(loop, slices, config);
}

Run half_run(gpt::Ops& ops, const gpt::GPTConfig& config, const gpt::Recompute& recompute, gpt::DType half) {
  gpt::Arena arena;
  gpt::LayerLoop<float> loop(config, kB, recompute, ops, arena, 1, gpt::TensorParallel{}, std::nullopt, half);
  HalfSlices slices(loop.table(), initial_weights(config), half);
  return train(loop, slices, config);
}

TEST_CASE("the half layer loop follows the fp32 loop within its dtype's rounding") {
  const gpt::GPTConfig config = gpt::test::small_parallel_model();
  gpt::MixedPrecisionCpuOps mixed;
  gpt::test::Fusing<gpt::MixedPrecisionCpuOps> fusing;
  gpt::Recompute host = gpt::Recompute::full();
  host.checkpoints_on_host = true;
  for (const gpt::Recompute& recompute : {gpt::Recompute{}, gpt::Recompute::selective(), host}) {
    const Run want = fp32_run(config, recompute);
    // bf16 keeps 8 bits of mantissa, fp16 11: the tolerances are about 4 rounding steps of each.
    // (No structured binding: clang 14 lets no lambda, INFO's included, capture one.)
    for (const std::pair<gpt::DType, double>& dtype :
         {std::pair{gpt::DType::kBF16, 2e-2}, std::pair{gpt::DType::kF16, 3e-3}}) {
      const gpt::DType half = dtype.first;
      const double tolerance = dtype.second;
      for (gpt::Ops* ops : {static_cast<gpt::Ops*>(&mixed), static_cast<gpt::Ops*>(&fusing)}) {
        INFO("recompute " << recompute.describe() << ", " << std::string(gpt::dtype_name(half))
                          << std::string(ops == &fusing ? ", fused head" : ""));
        const Run got = half_run(*ops, config, recompute, half);
        expect_relative("losses", got.losses, want.losses, tolerance / 10);
        expect_relative("gradients", got.grads, want.grads, tolerance);
      }
    }
  }
}

TEST_CASE("the half layer loop keeps its activations in the half dtype and the statistics in fp32") {
  const gpt::GPTConfig config = gpt::test::small_parallel_model();
  gpt::MixedPrecisionCpuOps mixed;
  gpt::Arena fp32_arena, half_arena;
  const gpt::LayerLoop<float> fp32(config, kB, gpt::Recompute{}, gpt::cpu_ops(), fp32_arena);
  const gpt::LayerLoop<float> half(config, kB, gpt::Recompute{}, mixed, half_arena, 1, gpt::TensorParallel{},
                                   std::nullopt, gpt::DType::kBF16);
  CHECK(half.compute_dtype() == gpt::DType::kBF16);
  CHECK(half.chunk_input().dtype == gpt::DType::kBF16);
  CHECK(half.head().lnf.dtype == gpt::DType::kBF16);
  CHECK(half.head().losses.dtype == gpt::DType::kF32);
  CHECK(half.head().lnf_mean.dtype == gpt::DType::kF32);
  // Every activation but the per-row statistics and losses (L layers x 4, the head's 4) halves.
  const size_t rows = size_t(kB) * config.seq_len, statistics = rows * (4 * config.num_layers + 4) * 4;
  CHECK(half.activation_bytes() == (fp32.activation_bytes() - statistics) / 2 + statistics);
}

}  // namespace
