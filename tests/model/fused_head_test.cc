// The layer loop with a backend that fuses the classifier (Ops::fuses_classifier, here the CPU backend
// saying so, so the loop runs the chunked default ops): the same losses and gradients as the unfused head
// within 1e-5, over two accumulated micro-steps with dropout on, in one chunk and in two; no whole logits
// held for training, and a forward without targets still leaves them all in head().probs.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "model/loop.h"
#include "model/model.h"
#include "tests/kernels/check.h"
#include "tests/model/flat_model.h"

namespace {

using gpt::test::expect_relative;

constexpr int kB = 2;

std::vector<float> initial_weights(const gpt::GPTConfig& config) {
  gpt::GPT2<float> init(config, kB);
  init.init(11);
  return init.params;
}

struct Run {
  std::vector<float> losses;  // each micro-step's mean loss
  std::vector<float> grads;
  size_t activation_bytes = 0;
};

Run train(gpt::Ops& ops, const gpt::GPTConfig& config, const gpt::Recompute& recompute, int B) {
  gpt::Arena arena;
  gpt::LayerLoop<float> loop(config, B, recompute, ops, arena);
  const gpt::ParamTable& table = loop.table();
  gpt::test::FlatSlices slices(table, initial_weights(config));
  Run r;
  for (int step = 0; step < 2; ++step) {
    const int n = B * config.seq_len;
    const std::vector<int32_t> x = gpt::test::lcg_tokens(n, config.vocab, 3 + step),
                               y = gpt::test::lcg_tokens(n, config.vocab, 13 + step);
    std::vector<int64_t> windows(static_cast<size_t>(B));
    for (int b = 0; b < B; ++b) windows[size_t(b)] = B * step + b;
    r.losses.push_back(
        loop.forward(slices, x.data(), y.data(), gpt::Dropout{0.1, 0.1, 5, windows.data()}, true));
    loop.backward(slices, slices, 0.5f);
  }
  r.grads = slices.grads;
  r.activation_bytes = loop.activation_bytes();
  return r;
}

TEST_CASE("the fused head trains as the unfused head does, within 1e-5") {
  const gpt::GPTConfig config = gpt::test::small_parallel_model();
  gpt::test::Fusing<gpt::CpuOps> fusing;
  // B = 80: 1280 rows, a chunk of 1024 and one of 256.
  for (int B : {kB, 80}) {
    for (const gpt::Recompute& recompute : {gpt::Recompute{}, gpt::Recompute::full()}) {
      INFO("B = " << B << ", recompute " << recompute.describe());
      const Run unfused = train(gpt::cpu_ops(), config, recompute, B);
      const Run fused = train(fusing, config, recompute, B);
      expect_relative("losses", fused.losses, unfused.losses, 1e-5);
      expect_relative("gradients", fused.grads, unfused.grads, 1e-5);
    }
  }
}

TEST_CASE("the fused head holds one chunk of logits, and a forward without targets gets them all") {
  const gpt::GPTConfig config = gpt::test::small_parallel_model();
  const int64_t rows = int64_t(kB) * config.seq_len, Vp = config.padded_vocab();
  gpt::test::Fusing<gpt::CpuOps> fusing;
  gpt::Arena fused_arena, unfused_arena;
  gpt::LayerLoop<float> fused(config, kB, gpt::Recompute{}, fusing, fused_arena);
  gpt::LayerLoop<float> unfused(config, kB, gpt::Recompute{}, gpt::cpu_ops(), unfused_arena);
  CHECK(fused.head().probs.empty());
  CHECK(fused.head().logits_chunk.shape == std::vector<int64_t>{gpt::classifier_chunk_rows(rows), Vp});
  CHECK(unfused.head().logits_chunk.empty());
  const size_t chunk_bytes = size_t(gpt::classifier_chunk_rows(rows) * Vp) * sizeof(float);
  CHECK(fused.activation_bytes() + size_t(rows * Vp) * sizeof(float) ==
        unfused.activation_bytes() + chunk_bytes);

  gpt::test::FlatSlices weights(fused.table(), initial_weights(config));
  const std::vector<int32_t> x = gpt::test::lcg_tokens(int(rows), config.vocab, 21);
  fused.forward(weights, x.data(), nullptr, gpt::Dropout{}, false);
  unfused.forward(weights, x.data(), nullptr, gpt::Dropout{}, false);
  REQUIRE(fused.head().probs.numel() == rows * Vp);
  const float* a = fused.head().probs.as<float>();
  const float* b = unfused.head().probs.as<float>();
  CHECK(std::vector<float>(a, a + rows * Vp) == std::vector<float>(b, b + rows * Vp));
  // The loop's count follows the logits it allocated for that forward.
  CHECK(fused.activation_bytes() == unfused.activation_bytes() + chunk_bytes);
}

}  // namespace
