// bench/zero_overlap: under mpiexec, tokens/s of ZeRO stage 0 and of stage 3 without and with overlap_comm,
// from the same initial weights and batches, one JSON line per configuration, then the ratio stage 3
// (overlap) / stage 0 and the time ranks spent blocked on communication by phase (mean over ranks).
//   mpiexec -n 2 bazel-bin/bench/zero_overlap --layers 12 --hidden 768 --heads 12 --seq 64 --batch 4
//     --steps 4
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "base/flags.h"
#include "base/main.h"
#include "comm/mpi_main.h"
#include "kernels/common/random.h"
#include "kernels/cpu/threads.h"
#include "train/model_flags.h"
#include "zero/engine.h"

namespace {

struct Measured {
  double tokens_per_s = 0;
  gpt::comm::TrafficCounts traffic;  // this rank, per step
};

Measured measure(gpt::comm::Communicator& world, const gpt::GPTConfig& model, const gpt::ZeroConfig& zero,
                 int batch, int steps) {
  gpt::ZeroEngine engine(model, zero, batch, world, 1234);
  const size_t BT = size_t(batch) * model.seq_len;
  std::vector<int32_t> inputs(BT), targets(BT);
  std::vector<int64_t> windows(batch);
  auto step = [&](int s) {
    for (size_t i = 0; i < BT; ++i) {
      const uint64_t key = gpt::random::derive_key(s, world.rank());
      inputs[i] = int32_t(gpt::random::bits(key, 2 * i) % model.vocab);
      targets[i] = int32_t(gpt::random::bits(key, 2 * i + 1) % model.vocab);
    }
    for (int b = 0; b < batch; ++b) windows[b] = (int64_t(s) * world.size() + world.rank()) * batch + b;
    engine.train_step({{inputs.data(), targets.data(), windows.data()}}, 1e-4);
  };
  step(0);  // warm-up: first touches of every buffer
  world.barrier().wait();
  const gpt::comm::TrafficCounts before = world.meter().snapshot();
  const auto start = std::chrono::steady_clock::now();
  for (int s = 1; s <= steps; ++s) step(s);
  world.barrier().wait();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  Measured m;
  m.tokens_per_s = double(BT) * world.size() * steps / seconds;
  m.traffic = world.meter().snapshot() - before;
  for (double& w : m.traffic.wait_ms) w /= steps;
  return m;
}

// Mean over ranks of a per-rank value.
double mean_over_ranks(gpt::comm::Communicator& world, double value) {
  float v = float(value);
  world.all_reduce(&v, gpt::DType::kF32, 1, 1.0f / world.size(), gpt::comm::Phase::kOther).wait();
  return v;
}

struct Options {
  gpt::GPTConfig model;
  int batch = 4, steps = 4, threads = 1;
  bool fp16 = false;
};

// Returns false when --help was printed. The position table grows to any --seq unless given.
bool parse(int argc, char** argv, Options& o) {
  o.model.seq_len = 64;
  gpt::FlagParser flags("bench/zero_overlap",
                        "ZeRO-3 with and without overlap_comm against stage 0, under mpiexec.");
  gpt::add_bench_shape_flags(flags, &o.model, &o.batch, "micro-batch per rank");
  flags.add_int("--steps", &o.steps, "timed steps per configuration (after one warm-up step)", 1, 1 << 20);
  flags.add_int("--threads", &o.threads, "CPU threads per rank", 1, 1024);
  flags.add_switch("--fp16", &o.fp16, "fp16 compute weights and gradients");
  if (!flags.parse(argc, argv)) return false;
  gpt::finish_bench_shape(flags, &o.model);
  return true;
}

// One JSON line per configuration (rank 0), then the ratio of stage 3 with overlap to stage 0.
void compare(gpt::comm::Communicator& world, const Options& o) {
  struct Config {
    const char* name;
    int stage;
    bool overlap;
  };
  const Config configs[] = {{"stage0", 0, false}, {"stage3", 3, false}, {"stage3_overlap", 3, true}};
  double stage0 = 0, overlapped = 0;
  for (const Config& c : configs) {
    gpt::ZeroConfig zero;
    zero.stage = c.stage;
    zero.overlap_comm = c.overlap;
    zero.precision = o.fp16 ? gpt::DType::kF16 : gpt::DType::kF32;
    zero.hidden_dropout = zero.attention_dropout = 0.1;
    zero.reduce_bucket_size = 10'000'000;
    const Measured m = measure(world, o.model, zero, o.batch, o.steps);
    std::string waits;
    for (int p = 0; p < gpt::comm::kNumPhases; ++p) {
      const double w = mean_over_ranks(world, m.traffic.wait_ms[p]);
      waits += std::string(p ? ", " : "") + "\"" + gpt::comm::phase_name(gpt::comm::Phase(p)) +
               "\": " + std::to_string(w);
    }
    if (c.stage == 0) stage0 = m.tokens_per_s;
    if (c.overlap) overlapped = m.tokens_per_s;
    if (world.rank() == 0) {
      std::printf(
          "{\"config\": \"%s\", \"ranks\": %d, \"tokens_per_s\": %.2f, \"comm_wait_ms_per_step\": {%s}}\n",
          c.name, world.size(), m.tokens_per_s, waits.c_str());
      std::fflush(stdout);
    }
  }
  if (world.rank() == 0) std::printf("{\"stage3_overlap_over_stage0\": %.3f}\n", overlapped / stage0);
}

}  // namespace

int main(int argc, char** argv) {
  return gpt::comm::run_mpi_main("bench/zero_overlap", argc, argv, [&](gpt::comm::MpiSession& session) {
    Options o;
    if (!parse(argc, argv, o)) return 0;
    gpt::cpu::set_num_threads(o.threads);
    compare(*session.world(), o);
    return 0;
  });
}
