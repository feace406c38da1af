// bench/train_step: times full single-process training steps (forward, backward, AdamW) of a GPT-2 shape and,
// in the same process and with the same threads, this machine's Eigen SGEMM rate at 2048^3, so that MFU is a
// ratio measured within one run. Ends with one JSON line. With --device cuda the steps run through the engine
// (ZeRO stage 0, one rank) on the GPU, and the rate is the GPU's fp32 GEMM at 2048^3 (TF32 off).

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "base/flags.h"
#include "comm/mpi_main.h"
#include "kernels/backend.h"
#include "kernels/cpu/adamw.h"
#include "kernels/cpu/threads.h"
#include "model/model.h"
#include "train/metrics.h"
#include "train/model_flags.h"
#include "zero/engine.h"
#include "zero/optimizer.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

struct Options {
  gpt::GPTConfig config;
  int batch = 4, steps = 5, threads = 2;
  std::string device = "cpu";
};

// Returns false when --help was printed. The position table grows to any --seq unless given.
bool parse(int argc, char** argv, Options& o) {
  o.config.seq_len = 64;
  gpt::FlagParser flags("bench/train_step",
                        "Times GPT-2 training steps and reports MFU against Eigen SGEMM.");
  gpt::add_bench_shape_flags(flags, &o.config, &o.batch, "sequences per step");
  flags.add_int("--steps", &o.steps, "timed steps (after one warm-up step)", 1, 1 << 20);
  flags.add_int("--threads", &o.threads, "CPU threads", 1, 1024);
  flags.add_string("--device", &o.device, "cpu | cuda (cuda: the engine at ZeRO stage 0 on one GPU)");
  if (!flags.parse(argc, argv)) return false;
  gpt::check_device_name(o.device);
  gpt::finish_bench_shape(flags, &o.config);
  return true;
}

// The same fixed tokens for every step and either path: inputs and targets [batch, T].
struct SyntheticBatch {
  std::vector<int32_t> inputs, targets;
  SyntheticBatch(const gpt::GPTConfig& config, int batch)
      : inputs(size_t(batch) * config.seq_len), targets(inputs.size()) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      inputs[i] = int32_t((i * 7919 + 13) % config.vocab);
      targets[i] = int32_t((i * 104729 + 7) % config.vocab);
    }
  }
};

// The timing lines and the JSON line, for either path.
void report(const Options& o, int64_t parameters, double step_s, double forward_s, double backward_s,
            double optimizer_s, double gemm_gflops) {
  const gpt::GPTConfig& config = o.config;
  const int T = config.seq_len, steps = o.steps;
  const double tokens_per_s = o.batch * T / step_s;
  const double model_gflops = config.model_flops_per_token() * tokens_per_s / 1e9;
  std::printf(
      "shape: %d layers, hidden %d, %d heads, seq %d, batch %d, %d threads, device %s; %.2fM "
      "parameters\n",
      config.num_layers, config.hidden, config.heads, T, o.batch, o.threads, o.device.c_str(),
      parameters / 1e6);
  std::printf("per step: %.1f ms (forward+zero_grad %.1f, backward %.1f, AdamW %.1f)\n", step_s * 1e3,
              forward_s / steps * 1e3, backward_s / steps * 1e3, optimizer_s / steps * 1e3);
  std::printf(
      "{\"tokens_per_s\": %.2f, \"ms_per_step\": %.2f, \"model_gflops\": %.2f, \"sgemm_gflops\": %.2f, "
      "\"mfu\": %.4f, \"device\": \"%s\"}\n",
      tokens_per_s, step_s * 1e3, model_gflops, gemm_gflops, model_gflops / gemm_gflops, o.device.c_str());
}

// --device cuda (or any backend): the engine at ZeRO stage 0 on one rank, fp32, AdamW as on the CPU path.
int run_on_backend(gpt::comm::MpiSession& session, const Options& o) {
  const std::unique_ptr<gpt::comm::Communicator> world = session.world(gpt::comm::MpiOptions{});
  const std::unique_ptr<gpt::Ops> backend = gpt::make_backend(o.device, 0);
  gpt::ZeroConfig zero;
  zero.adam.weight_decay = 0.1;
  gpt::ZeroEngine engine(o.config, zero, o.batch, *world, 1, backend.get());
  const SyntheticBatch tokens(o.config, o.batch);
  std::vector<int64_t> windows(size_t(o.batch));
  for (int b = 0; b < o.batch; ++b) windows[size_t(b)] = b;
  const std::vector<gpt::ZeroEngine::MicroBatch> batch{
      {tokens.inputs.data(), tokens.targets.data(), windows.data()}};
  const double gemm_before = gpt::measure_gemm_gflops(*backend, 2048);
  engine.train_step(batch, 1e-4);  // warm-up
  double forward_ms = 0, backward_ms = 0, optimizer_ms = 0;
  const auto start = Clock::now();
  for (int s = 0; s < o.steps; ++s) {
    const gpt::ZeroEngine::StepResult r = engine.train_step(batch, 1e-4);
    forward_ms += r.forward_ms;
    backward_ms += r.backward_ms;
    optimizer_ms += r.optimizer_ms;
  }
  const double step_s = seconds_since(start) / o.steps;
  const double gemm = std::max(gemm_before, gpt::measure_gemm_gflops(*backend, 2048));
  report(o, engine.table().total, step_s, forward_ms / 1e3, backward_ms / 1e3, optimizer_ms / 1e3, gemm);
  return 0;
}

int run(gpt::comm::MpiSession& session, int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, o)) return 0;
  if (o.device != "cpu") return run_on_backend(session, o);
  const gpt::GPTConfig& config = o.config;
  const int batch = o.batch, steps = o.steps, threads = o.threads;
  gpt::cpu::set_num_threads(threads);

  gpt::GPT2<float> model(config, batch);
  model.init(1);
  const int64_t n = model.table().total;
  std::vector<float> m(n, 0.0f), v(n, 0.0f);
  const SyntheticBatch tokens(config, batch);
  gpt::cpu::AdamWHyper hyper;
  hyper.weight_decay = 0.1;

  double forward_s = 0, backward_s = 0, optimizer_s = 0;
  auto one_step = [&](int step, bool timed) {
    auto t0 = Clock::now();
    model.zero_grad();
    model.forward(tokens.inputs.data(), tokens.targets.data());
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
  report(o, n, step_s, forward_s, backward_s, optimizer_s, sgemm_gflops);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return gpt::comm::run_mpi_main("bench/train_step", argc, argv,
                                 [&](gpt::comm::MpiSession& session) { return run(session, argc, argv); });
}
