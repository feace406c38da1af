// The ZeRO engine at its simplest (1 rank, stage 0, fp32) equals the single-process model plus AdamW bit for
// bit over 5 steps, dropout on. This ties the engine's layer loop to the model's: a bug common to every stage
// cannot hide behind the stages agreeing with each other.
#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include "kernels/cpu/adamw.h"
#include "model/model.h"
#include "tests/comm/mpi_test_env.h"
#include "tests/zero/engine_harness.h"
#include "zero/engine.h"

namespace gpt {
namespace {

// Deterministic tokens for step s: inputs and targets [B, T] and each sequence's window.
struct Batch {
  std::vector<int32_t> inputs, targets;
  std::vector<int64_t> windows;
};
Batch make_batch(const GPTConfig& c, int B, int step) {
  Batch b;
  uint32_t state = 977u + 131u * uint32_t(step);
  for (int i = 0; i < B * c.seq_len; ++i) {
    state = state * 1664525u + 1013904223u;
    b.inputs.push_back(int32_t((state >> 8) % uint32_t(c.vocab)));
    state = state * 1664525u + 1013904223u;
    b.targets.push_back(int32_t((state >> 8) % uint32_t(c.vocab)));
  }
  for (int s = 0; s < B; ++s) b.windows.push_back(int64_t(step) * B + s);
  return b;
}

bool same_bits(const float* a, const float* b, size_t n) {
  return std::memcmp(a, b, n * sizeof(float)) == 0;
}

TEST_CASE("engine at 1 rank, stage 0, fp32 equals GPT2 + AdamW bit for bit") {
  auto& world = comm::testing::world();
  if (world.size() != 1) return;  // the comparison is defined at one rank
  const GPTConfig c = testing::tiny_model();
  const int B = 2;
  const uint64_t seed = 11;
  const double lr = 1e-3;
  ZeroConfig z;
  z.stage = 0;
  z.hidden_dropout = 0.1;
  z.attention_dropout = 0.1;
  z.adam.weight_decay = 0.1;
  ZeroEngine engine(c, z, B, world, seed);

  GPT2<float> model(c, B);
  model.init(seed);
  model.set_dropout(z.hidden_dropout, z.attention_dropout, seed);
  std::vector<float> m(model.params.size(), 0.0f), v(model.params.size(), 0.0f);
  cpu::AdamWHyper hyper = z.adam, no_decay = z.adam;
  hyper.lr = no_decay.lr = lr;
  no_decay.weight_decay = 0;

  REQUIRE(same_bits(engine.gather_master().data(), model.params.data(), model.params.size()));
  for (int step = 1; step <= 5; ++step) {
    const Batch batch = make_batch(c, B, step);
    const ZeroEngine::StepResult r =
        engine.train_step({{batch.inputs.data(), batch.targets.data(), batch.windows.data()}}, lr);

    model.zero_grad();
    const float loss = model.forward(batch.inputs.data(), batch.targets.data(), batch.windows.data());
    model.backward(1.0f);
    for (const ParamInfo& p : model.table().params) {
      const size_t at = size_t(p.offset);
      cpu::adamw_update(model.params.data() + at, model.grads.data() + at, m.data() + at, v.data() + at,
                        p.numel, p.weight_decay ? hyper : no_decay, step, 1.0f);
    }
    CHECK_FALSE(r.skipped);
    CHECK(float(r.loss) == loss);
    const std::vector<float> engine_weights = engine.gather_master();
    CHECK_MESSAGE(same_bits(engine_weights.data(), model.params.data(), model.params.size()),
                  "weights differ after step " << step);
  }
}

}  // namespace
}  // namespace gpt
