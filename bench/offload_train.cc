// bench/offload_train: ZeRO-Infinity's step on one rank. Trains a GPT-2 shape at ZeRO stage 3 with the
// optimizer state and/or the compute weights in RAM or on NVMe (swap files under --nvme-path), and reports
// per step the time and its parts, the disk's bytes and busy time, the time the engine waited for the disk
// (the rest of the busy time was hidden behind compute), and the peak resident memory (VmHWM). One JSON line
// per run, so that bench/offload.sh can put RAM and NVMe side by side from the same binary.
//   bazel-bin/bench/offload_train --num-layers 48 --hidden-size 1600 --num-attention-heads 25 --seq 512
//     --batch 1 --fp16 --checkpoint-activations --offload-optimizer nvme --offload-param nvme --nvme-path
//     /work/swap
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/flags.h"
#include "base/user_error.h"
#include "comm/mpi_main.h"
#include "kernels/cpu/threads.h"
#include "train/memory_guard.h"
#include "train/model_flags.h"
#include "zero/engine.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  gpt::GPTConfig config;
  int batch = 1, steps = 3, threads = 2;
  bool fp16 = false, checkpoint = false;
  std::string offload_optimizer = "none", offload_param = "none", nvme_path;
  int64_t sub_group_size = gpt::kDefaultSubGroupSize;
  int buffer_count = 4;
  int64_t param_buffer_size = 100'000'000;  // offload_param.buffer_size: at least the largest unit shard
  // Elements per gradient bucket. DeepSpeed's default of 5e8 means 3 GB per bucket in flight at one rank
  // (fp16 sends, fp32 results); ZeRO-Infinity's examples use small buckets, and so does this bench.
  int64_t reduce_bucket_size = 50'000'000;
};

gpt::OffloadDevice device_named(const std::string& name, const char* flag) {
  if (name == "none") return gpt::OffloadDevice::kNone;
  if (name == "nvme") return gpt::OffloadDevice::kNvme;
  throw gpt::UsageError(std::string(flag) + " is '" + name + "'; use none or nvme");
}

bool parse(int argc, char** argv, Options& o) {
  o.config.seq_len = 512;
  gpt::FlagParser flags("bench/offload_train", "Times ZeRO-3 steps with state in RAM or on NVMe (one rank).");
  gpt::add_bench_shape_flags(flags, &o.config, &o.batch, "sequences per step");
  flags.add_int("--steps", &o.steps, "timed steps (the first one included: it is what a user waits for)", 1,
                1 << 20);
  flags.add_int("--threads", &o.threads, "CPU threads", 1, 1024);
  flags.add_switch("--fp16", &o.fp16, "fp16 compute weights (else fp32)");
  flags.add_switch("--checkpoint-activations", &o.checkpoint, "full activation checkpointing");
  flags.add_string("--offload-optimizer", &o.offload_optimizer, "none | nvme");
  flags.add_string("--offload-param", &o.offload_param, "none | nvme");
  flags.add_string("--nvme-path", &o.nvme_path, "folder for the swap files");
  flags.add_int64("--sub-group-size", &o.sub_group_size, "zero_optimization.sub_group_size", 2048,
                  int64_t(1) << 40);
  flags.add_int("--buffer-count", &o.buffer_count, "offload_optimizer.buffer_count", 1, 64);
  flags.add_int64("--param-buffer-size", &o.param_buffer_size,
                  "offload_param.buffer_size in elements (at least the largest unit shard; DeepSpeed's 1e8)",
                  1, int64_t(1) << 40);
  flags.add_int64("--reduce-bucket-size", &o.reduce_bucket_size, "zero_optimization.reduce_bucket_size", 1,
                  int64_t(1) << 40);
  if (!flags.parse(argc, argv)) return false;
  gpt::finish_bench_shape(flags, &o.config);
  return true;
}

gpt::ZeroConfig zero_config(const Options& o) {
  gpt::ZeroConfig zero;
  zero.stage = 3;
  zero.precision = o.fp16 ? gpt::DType::kF16 : gpt::DType::kF32;
  zero.checkpoint_activations = o.checkpoint;
  zero.overlap_comm = true;
  zero.reduce_bucket_size = o.reduce_bucket_size;
  zero.adam.weight_decay = 0.1;
  gpt::OffloadConfig& f = zero.offload;
  f.optimizer = device_named(o.offload_optimizer, "--offload-optimizer");
  f.param = device_named(o.offload_param, "--offload-param");
  f.optimizer_nvme_path = f.param_nvme_path = o.nvme_path;
  f.sub_group_size = o.sub_group_size;
  f.optimizer_buffer_count = o.buffer_count;
  f.param_buffer_size = o.param_buffer_size;
  f.run_id = "bench_offload_train";
  return zero;
}

int run(gpt::comm::MpiSession& session, int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, o)) return 0;
  gpt::cpu::set_num_threads(o.threads);
  const std::unique_ptr<gpt::comm::Communicator> world = session.world(gpt::comm::MpiOptions{});
  const gpt::ZeroConfig zero = zero_config(o);
  if (std::string problem = gpt::ZeroEngine::check_offload(zero, o.config, 1); !problem.empty())
    throw gpt::UsageError(problem);
  const auto built = Clock::now();
  gpt::ZeroEngine engine(o.config, zero, o.batch, *world, 1);
  const double init_s = std::chrono::duration<double>(Clock::now() - built).count();
  std::vector<int32_t> inputs(size_t(o.batch) * o.config.seq_len), targets(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    inputs[i] = int32_t((i * 7919 + 13) % o.config.vocab);
    targets[i] = int32_t((i * 104729 + 7) % o.config.vocab);
  }
  std::vector<int64_t> windows(size_t(o.batch));
  for (int b = 0; b < o.batch; ++b) windows[size_t(b)] = b;
  const std::vector<gpt::ZeroEngine::MicroBatch> batch{{inputs.data(), targets.data(), windows.data()}};
  nlohmann::json steps = nlohmann::json::array();
  for (int s = 0; s < o.steps; ++s) {
    const gpt::offload::Swapper::Stats before = engine.swap_stats();
    const auto start = Clock::now();
    const gpt::ZeroEngine::StepResult r = engine.train_step(batch, 1e-4);
    const double step_s = std::chrono::duration<double>(Clock::now() - start).count();
    const gpt::offload::Swapper::Stats after = engine.swap_stats();
    const double busy = after.read_busy_seconds - before.read_busy_seconds + after.write_busy_seconds -
                        before.write_busy_seconds;
    const double waited = after.wait_seconds - before.wait_seconds;
    steps.push_back({{"step", s + 1},
                     {"loss", r.loss},
                     {"step_s", step_s},
                     {"forward_s", r.forward_ms / 1e3},
                     {"backward_s", r.backward_ms / 1e3},
                     {"optimizer_s", r.optimizer_ms / 1e3},
                     {"disk_read_bytes", after.bytes_read - before.bytes_read},
                     {"disk_write_bytes", after.bytes_written - before.bytes_written},
                     {"disk_busy_s", busy},
                     {"disk_wait_s", waited}});
    std::fprintf(stderr, "step %d: %.1f s (optimizer %.1f s), loss %.4f, disk busy %.1f s, waited %.1f s\n",
                 s + 1, step_s, r.optimizer_ms / 1e3, r.loss, busy, waited);
  }
  nlohmann::json line = {{"bench", "offload_train"},
                         {"layers", o.config.num_layers},
                         {"hidden", o.config.hidden},
                         {"heads", o.config.heads},
                         {"seq", o.config.seq_len},
                         {"batch", o.batch},
                         {"params", engine.table().total},
                         {"precision", o.fp16 ? "fp16" : "fp32"},
                         {"checkpoint_activations", o.checkpoint},
                         {"offload_optimizer", o.offload_optimizer},
                         {"offload_param", o.offload_param},
                         {"sub_group_size", o.sub_group_size},
                         {"buffer_count", o.buffer_count},
                         {"reduce_bucket_size", o.reduce_bucket_size},
                         {"init_s", init_s},
                         {"peak_rss_bytes", gpt::peak_rss_bytes()},
                         {"steps", steps}};
  std::printf("%s\n", line.dump().c_str());
  for (const std::string& note : engine.notes()) std::fprintf(stderr, "note: %s\n", note.c_str());
  std::fputs(engine.memory_table().c_str(), stderr);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return gpt::comm::run_mpi_main("bench/offload_train", argc, argv,
                                 [&](gpt::comm::MpiSession& session) { return run(session, argc, argv); });
}
