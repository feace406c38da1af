// bench/train_step: times full single-process training steps (forward, backward, AdamW) of a GPT-2 shape and,
// in the same process and with the same threads, this machine's Eigen SGEMM rate at 2048^3, so that MFU is a
// ratio measured within one run. Ends with one JSON line.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "base/flags.h"
#include "base/main.h"
#include "kernels/cpu/adamw.h"
#include "kernels/cpu/threads.h"
#include "model/model.h"
#include "train/metrics.h"
#include "train/model_flags.h"
#include "zero/optimizer.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

struct Options {
  gpt::GPTConfig config;
  int batch = 4, steps = 5, threads = 2;
};

// Returns false when --help was printed. The position table grows to any --seq unless given.
bool parse(int argc, char** argv, Options& o) {
  o.config.seq_len = 64;
  gpt::FlagParser flags("bench/train_step",
                        "Times GPT-2 training steps and reports MFU against Eigen SGEMM.");
  gpt::add_bench_shape_flags(flags, &o.config, &o.batch, "sequences per step");
  flags.add_int("--steps", &o.steps, "timed steps (after one warm-up step)", 1, 1 << 20);
  flags.add_int("--threads", &o.threads, "CPU threads", 1, 1024);
  if (!flags.parse(argc, argv)) return false;
  gpt::finish_bench_shape(flags, &o.config);
  return true;
}

int run(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, o)) return 0;
  const gpt::GPTConfig& config = o.config;
  const int batch = o.batch, steps = o.steps, threads = o.threads;
  gpt::cpu::set_num_threads(threads);

  const int T = config.seq_len;
  gpt::GPT2<float> model(config, batch);
  model.init(1);
  const int64_t n = model.table().total;
  std::vector<float> m(n, 0.0f), v(n, 0.0f);
  std::vector<int32_t> inputs(size_t(batch) * T), targets(size_t(batch) * T);
  for (size_t i = 0; i < inputs.size(); ++i) {
    inputs[i] = int32_t((i * 7919 + 13) % config.vocab);
    targets[i] = int32_t((i * 104729 + 7) % config.vocab);
  }
  gpt::cpu::AdamWHyper hyper;
  hyper.weight_decay = 0.1;

  double forward_s = 0, backward_s = 0, optimizer_s = 0;
  auto one_step = [&](int step, bool timed) {
    auto t0 = Clock::now();
    model.zero_grad();
    model.forward(inputs.data(), targets.data());
    auto t1 = Clock::now();
    model.backward(1.0f);
    auto t2 = Clock::now();
    gpt::adamw_step_range(model.table(), 0, n, model.params.data(), model.grads.data(), m.data(), v.data(),
                          hyper, step, 1.0f);
    auto t3 = Clock::now();
    if (timed) {
      forward_s += std::chrono::duration<double>(t1 - t0).count();
      backward_s += std::chrono::duration<double>(t2 - t1).count();
      optimizer_s += std::chrono::duration<double>(t3 - t2).count();
    }
  };
  // SGEMM is measured before and after the steps and the better rate kept, so that a noisy moment on a shared
  // machine cannot flatter the MFU.
  const double sgemm_before = gpt::measure_sgemm_gflops(2048);
  one_step(1, false);
  auto start = Clock::now();
  for (int s = 0; s < steps; ++s) one_step(s + 2, true);
  const double step_s = seconds_since(start) / steps;

  const double sgemm_gflops = std::max(sgemm_before, gpt::measure_sgemm_gflops(2048));
  const double tokens_per_s = batch * T / step_s;
  const double model_gflops = config.model_flops_per_token() * tokens_per_s / 1e9;
  std::printf("shape: %d layers, hidden %d, %d heads, seq %d, batch %d, %d threads; %.2fM parameters\n",
              config.num_layers, config.hidden, config.heads, T, batch, threads, n / 1e6);
  std::printf("per step: %.1f ms (forward+zero_grad %.1f, backward %.1f, AdamW %.1f)\n", step_s * 1e3,
              forward_s / steps * 1e3, backward_s / steps * 1e3, optimizer_s / steps * 1e3);
  std::printf(
      "{\"tokens_per_s\": %.2f, \"ms_per_step\": %.2f, \"model_gflops\": %.2f, \"sgemm_gflops\": %.2f, "
      "\"mfu\": %.4f}\n",
      tokens_per_s, step_s * 1e3, model_gflops, sgemm_gflops, model_gflops / sgemm_gflops);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return gpt::run_main("bench/train_step", [&] { return run(argc, argv); });
}
