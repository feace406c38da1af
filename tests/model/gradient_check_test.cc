// Whole-model gradient check: every parameter's analytic gradient of a tiny GPT-2, in double precision,
// against a fourth-order central difference of the loss (see gradient_check.h), without dropout.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstdio>
#include <vector>

#include "kernels/cpu/threads.h"
#include "model/model.h"
#include "tests/model/gradient_check.h"
#include "tests/sanitized_build.h"

TEST_CASE("tiny GPT-2: analytic gradients of every parameter match central differences") {
  // The model is tiny: one thread is fastest, and two oversubscribe a busy machine (15x slower).
  gpt::cpu::set_num_threads(1);
  const gpt::GPTConfig config = gpt::test::tiny_config();
  const int B = 2, T = config.seq_len;
  gpt::GPT2<double> model(config, B);
  model.init(1234);
  gpt::test::perturb_norms_and_biases(model);
  std::vector<int32_t> inputs(B * T), targets(B * T);
  for (int i = 0; i < B * T; ++i) {
    inputs[i] = (i * 37 + 11) % config.vocab;
    targets[i] = (i * 53 + 7) % config.vocab;
  }

  model.zero_grad();
  model.forward(inputs.data(), targets.data());
  model.backward(1.0);
  const std::vector<double> analytic = model.grads;

  // Every parameter; every 7th of each tensor in a sanitized build.
  const int64_t stride = gpt::test::sampled_stride(1, 7);
  const auto stats = gpt::test::check_model_gradients(
      model, analytic, [&] { return model.forward(inputs.data(), targets.data()); }, stride);
  std::printf(
      "gradient check: %d parameters (%d with |g| > 1e-6), worst relative error %.3g, worst absolute "
      "error elsewhere %.3g\n",
      stats.checked, stats.large, stats.worst_rel, stats.worst_abs);
  CHECK(stats.checked == gpt::test::elements_checked(model.table(), stride));
  CHECK(stats.large > stats.checked / 2);
}
