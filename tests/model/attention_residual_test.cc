// The layer loop with a backend that keeps attention's log-sum-exp instead of its probabilities
// (Ops::attention_residual = kLogSumExp; kernels/cpu/flash_cpu_ops.h, the CPU's flash attention): the default
// CPU backend's losses and gradients within 1e-6 relative (fp32) over two accumulated micro-steps, dropout
// off and on, without recomputation and with selective and full recomputation; its activations smaller by
// exactly the probabilities it does not keep, and equal to train/activation_formulas' count for that kind.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/flash_cpu_ops.h"
#include "model/loop.h"
#include "model/model.h"
#include "tests/kernels/check.h"
#include "tests/model/flat_model.h"
#include "train/activation_formulas.h"

namespace {

using gpt::test::expect_relative;

using gpt::AttentionResidual;
using gpt::Recompute;

constexpr int kB = 2;

// 80 positions: two of the flash kernel's 64-row tiles, the second partial.
gpt::GPTConfig model() {
  gpt::GPTConfig c = gpt::test::small_parallel_model();
  c.seq_len = c.max_positions = 80;
  return c;
}

std::vector<float> initial_weights(const gpt::GPTConfig& config) {
  gpt::GPT2<float> init(config, kB);
  init.init(17);
  return init.params;
}

struct Run {
  std::vector<float> losses;  // each micro-step's mean loss
  std::vector<float> grads;
  size_t activation_bytes = 0;
};

Run train(gpt::Ops& ops, const Recompute& recompute, bool dropout) {
  const gpt::GPTConfig config = model();
  gpt::Arena arena;
  gpt::LayerLoop<float> loop(config, kB, recompute, ops, arena);
  gpt::test::FlatSlices slices(loop.table(), initial_weights(config));
  Run r;
  for (int step = 0; step < 2; ++step) {
    const int n = kB * config.seq_len;
    const std::vector<int32_t> x = gpt::test::lcg_tokens(n, config.vocab, 5 + step),
                               y = gpt::test::lcg_tokens(n, config.vocab, 15 + step);
    const int64_t windows[kB] = {2 * step, 2 * step + 1};
    const gpt::Dropout drop = dropout ? gpt::Dropout{0.1, 0.1, 3, windows} : gpt::Dropout{};
    r.losses.push_back(loop.forward(slices, x.data(), y.data(), drop, true));
    loop.backward(slices, slices, 0.5f);
  }
  r.grads = slices.grads;
  r.activation_bytes = loop.activation_bytes();
  return r;
}

const Recompute kRecomputations[] = {Recompute{}, Recompute::selective(), Recompute::full()};

}  // namespace

TEST_CASE("a backend keeping the log-sum-exp trains as the one keeping the probabilities, within 1e-6") {
  gpt::FlashCpuOps flash;
  for (const Recompute& recompute : kRecomputations) {
    for (bool dropout : {false, true}) {
      INFO("recompute " << recompute.describe() << ", dropout " << dropout);
      const Run probabilities = train(gpt::cpu_ops(), recompute, dropout);
      const Run lse = train(flash, recompute, dropout);
      expect_relative("losses", lse.losses, probabilities.losses, 1e-6);
      expect_relative("gradients", lse.grads, probabilities.grads, 1e-6);
    }
  }
}

TEST_CASE("the log-sum-exp backend's activations: smaller by the probabilities, as the formulas count") {
  const gpt::GPTConfig config = model();
  const int64_t L = config.num_layers, NH = config.heads, T = config.seq_len;
  gpt::FlashCpuOps flash;
  for (const Recompute& recompute : kRecomputations) {
    INFO("recompute " << recompute.describe());
    gpt::Arena probabilities_arena, lse_arena;
    const gpt::LayerLoop<float> probabilities(config, kB, recompute, gpt::cpu_ops(), probabilities_arena);
    const gpt::LayerLoop<float> lse(config, kB, recompute, flash, lse_arena);
    // Each activation set that owns a residual holds [B,NH,T] log-sum-exp in place of [B,NH,T,T]
    // probabilities, 4 bytes each: every one of the L blocks without recomputation, the one shared set with
    // selective recomputation, and the one set full recomputation (uniform, 1 layer) recomputes into.
    const int64_t owning_sets = recompute.granularity == gpt::RecomputeGranularity::kNone ? L : 1;
    CHECK(probabilities.activation_bytes() - lse.activation_bytes() ==
          size_t(owning_sets * kB * NH * (T * T - T) * 4));

    const gpt::ActivationShape shape = gpt::activation_shape(config, kB);
    gpt::ActivationSetup setup{1, false, recompute};
    CHECK(size_t(gpt::restated_activations(shape, setup).total_bytes) == probabilities.activation_bytes());
    setup.attention_residual = AttentionResidual::kLogSumExp;
    CHECK(size_t(gpt::restated_activations(shape, setup).total_bytes) == lse.activation_bytes());
  }
}
