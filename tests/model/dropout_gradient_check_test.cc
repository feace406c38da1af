// Whole-model gradient check with hidden and attention dropout 0.1 (every tensor, every third element): with
// the windows fixed the masks are fixed, so the loss is a smooth function of the parameters and its analytic
// gradient must match a fourth-order central difference (gradient_check.h) as tightly as without dropout.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstdio>
#include <vector>

#include "kernels/cpu/threads.h"
#include "model/model.h"
#include "tests/model/gradient_check.h"
#include "tests/sanitized_build.h"

TEST_CASE("tiny GPT-2 with dropout 0.1: analytic gradients of every tensor match central differences") {
  // The model is tiny: one thread is fastest, and two oversubscribe a busy machine (15x slower).
  gpt::cpu::set_num_threads(1);
  const gpt::GPTConfig config = gpt::test::tiny_config();
  const int B = 2, T = config.seq_len;
  gpt::GPT2<double> model(config, B);
  model.init(1234);
  gpt::test::perturb_norms_and_biases(model);
  model.set_dropout(0.1, 0.1, 99);
  std::vector<int32_t> inputs(B * T), targets(B * T);
  for (int i = 0; i < B * T; ++i) {
    inputs[i] = (i * 37 + 11) % config.vocab;
    targets[i] = (i * 53 + 7) % config.vocab;
  }
  const std::vector<int64_t> windows = {5, 17};

  const double plain = model.forward(inputs.data(), targets.data());
  model.zero_grad();
  const double dropped = model.forward(inputs.data(), targets.data(), windows.data());
  CHECK(dropped != plain);  // the masks are on
  model.backward(1.0);
  const std::vector<double> analytic = model.grads;

  // Every third element of each tensor: 3 is coprime with every width, so all columns (channels, heads,
  // positions) are visited, and the run costs a third of the full check that gradient_check_test does
  // (every 21st in a sanitized build).
  constexpr int64_t kStride = gpt::test::sampled_stride(3, 7);
  const auto stats = gpt::test::check_model_gradients(
      model, analytic, [&] { return model.forward(inputs.data(), targets.data(), windows.data()); }, kStride);
  std::printf(
      "gradient check with dropout: %d parameters (%d with |g| > 1e-6), worst relative error %.3g, worst "
      "absolute error elsewhere %.3g\n",
      stats.checked, stats.large, stats.worst_rel, stats.worst_abs);
  CHECK(stats.checked == gpt::test::elements_checked(model.table(), kStride));
  CHECK(stats.large > stats.checked / 2);
}
