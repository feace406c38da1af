// A 2-layer GPT-2 must memorize one repeated batch: loss below 0.05 within 300 AdamW steps.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "kernels/cpu/adamw.h"
#include "model/model.h"
#include "zero/optimizer.h"

TEST_CASE("a 2-layer model overfits one repeated batch") {
  gpt::GPTConfig config;
  config.num_layers = 2;
  config.hidden = 64;
  config.heads = 4;
  config.seq_len = 32;
  config.max_positions = 32;
  config.vocab = 256;
  const int B = 4, T = config.seq_len;
  gpt::GPT2<float> model(config, B);
  model.init(42);

  // A pseudo-random batch: nothing to learn but the batch itself.
  std::vector<int32_t> tokens(B * T + 1);
  uint32_t state = 12345;
  for (auto& t : tokens) {
    state = state * 1664525u + 1013904223u;
    t = int32_t((state >> 8) % config.vocab);
  }
  std::vector<int32_t> inputs(tokens.begin(), tokens.end() - 1), targets(tokens.begin() + 1, tokens.end());

  std::vector<float> m(model.params.size(), 0.0f), v(model.params.size(), 0.0f);
  gpt::cpu::AdamWHyper hyper;
  hyper.lr = 3e-3;
  hyper.beta2 = 0.99;
  hyper.weight_decay = 0.0;
  float loss = 0;
  int steps = 0;
  for (steps = 1; steps <= 300; ++steps) {
    model.zero_grad();
    loss = model.forward(inputs.data(), targets.data());
    if (steps == 1) CHECK(std::fabs(loss - std::log(float(config.vocab))) < 0.1f);  // uniform at init
    if (loss < 0.05f) break;
    model.backward(1.0f);
    gpt::adamw_step_range(model.table(), 0, model.table().total, model.params.data(), model.grads.data(),
                          m.data(), v.data(), hyper, steps, 1.0f);
  }
  std::printf("overfit: loss %.4f after %d steps\n", loss, steps - 1);
  CHECK(loss < 0.05f);
}
