// bench/offload_train: ZeRO-Infinity's step. Trains a GPT-2 shape at ZeRO stage 3 with the optimizer state
// and/or the compute weights in RAM or on NVMe (swap files under --nvme-path), optionally with memory-centric
// tiling (--tile-factor), and reports per step the time and its parts, the disk's bytes and busy time, the
// time the engine waited for the disk (the rest of the busy time was hidden behind compute), the engine's
// memory table (its "buffers" peak: the gathered working memory that tiling shrinks) and the peak resident
// memory (VmHWM). One JSON line per run, printed by rank 0 (under mpiexec with the largest VmHWM of any
// rank too), so that bench/offload.sh can put configurations side by side from the same binary.
//   bazel-bin/bench/offload_train --num-layers 48 --hidden-size 1600 --num-attention-heads 25 --seq 512
//     --batch 1 --fp16 --checkpoint-activations --offload-optimizer nvme --offload-param nvme --nvme-path
//     /work/swap
//   mpiexec -n 2 bazel-bin/bench/offload_train --layers 2 --hidden 4096 --heads 32 --vocab-size 1000 --seq 64
//     --max-position-embeddings 64 --fp16 --checkpoint-activations --threads 1 --tile-factor 4
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/flags.h"
#include "base/user_error.h"
#include "comm/mpi_main.h"
#include "comm/traffic.h"
#include "kernels/cpu/threads.h"
#include "model/params.h"
#include "train/memory_guard.h"
#include "train/model_flags.h"
#include "zero/engine.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  gpt::GPTConfig config;
  int batch = 1, steps = 3, threads = 2;
  int tile_factor = 1;  // memory-centric tiling: each block matrix in this many gather units
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
  flags.add_int("--tile-factor", &o.tile_factor,
                "memory-centric tiling: each block matrix in N tiles of output rows, gathered in turn", 1,
                1 << 16);
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
  if (std::string problem = gpt::tile_factor_problem(o.config, o.tile_factor); !problem.empty())
    throw gpt::UsageError("--tile-factor: " + problem + "; use 1 or a factor that divides hidden / 16");
  return true;
}

gpt::ZeroConfig zero_config(const Options& o) {
  gpt::ZeroConfig zero;
  zero.stage = 3;
  zero.precision = o.fp16 ? gpt::DType::kF16 : gpt::DType::kF32;
  zero.recompute = o.checkpoint ? gpt::Recompute::full() : gpt::Recompute{};
  zero.tile_factor = o.tile_factor;
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

// The bytes this rank sent for weight gathers (forward and backward) since `since`: with activation
// checkpointing a tiled block's backward gathers the recomputed tiles a second time.
uint64_t gather_bytes(const gpt::comm::Communicator& world, const gpt::comm::TrafficCounts& since) {
  const gpt::comm::TrafficCounts now = world.meter().snapshot();
  return now.at(gpt::comm::Phase::kParamGatherFwd) + now.at(gpt::comm::Phase::kParamGatherBwd) -
         since.at(gpt::comm::Phase::kParamGatherFwd) - since.at(gpt::comm::Phase::kParamGatherBwd);
}

// Times each step, with the disk's share of it; prints one line per step on rank 0.
nlohmann::json time_steps(gpt::ZeroEngine& engine, const gpt::comm::Communicator& world, const Options& o,
                          bool talk) {
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
    const gpt::comm::TrafficCounts traffic_before = world.meter().snapshot();
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
                     {"disk_wait_s", waited},
                     {"gather_bytes", gather_bytes(world, traffic_before)}});
    if (talk)
      std::fprintf(stderr, "step %d: %.1f s (optimizer %.1f s), loss %.4f, disk busy %.1f s, waited %.1f s\n",
                   s + 1, step_s, r.optimizer_ms / 1e3, r.loss, busy, waited);
  }
  return steps;
}

// This rank's memory as the engine counts it (the memory table: its "buffers" peak, the gather slots, unit
// gradients, buckets and staging, is what tiling shrinks; its total is what the memory guard predicts) and
// as the kernel measured it (VmHWM).
struct MemoryReport {
  double buffers = 0, table_total = 0, peak_rss = 0;
};

MemoryReport rank_memory(const gpt::ZeroEngine& engine) {
  MemoryReport m;
  for (const gpt::ZeroEngine::MemoryLine& line : engine.memory()) {
    m.table_total += double(line.bytes);
    if (line.state == "buffers") m.buffers = double(line.bytes);
  }
  m.peak_rss = gpt::peak_rss_bytes();
  return m;
}

// Every rank's numbers at every rank (the ranks may differ: shards and buckets are uneven).
std::vector<MemoryReport> gather_memory(gpt::comm::Communicator& world, const MemoryReport& mine) {
  std::vector<MemoryReport> all(size_t(world.size()));
  world.all_gather(&mine, all.data(), sizeof mine, gpt::comm::Phase::kOther).wait();
  return all;
}

nlohmann::json memory_json(const std::vector<MemoryReport>& ranks) {
  auto most = [&](double MemoryReport::*field) {
    double m = 0;
    for (const MemoryReport& r : ranks) m = std::max(m, r.*field);
    return m;
  };
  return {{"buffers_peak_bytes", ranks[0].buffers},
          {"memory_table_total_bytes", ranks[0].table_total},
          {"peak_rss_bytes", ranks[0].peak_rss},
          {"buffers_peak_max_bytes", most(&MemoryReport::buffers)},
          {"memory_table_total_max_bytes", most(&MemoryReport::table_total)},
          {"peak_rss_max_bytes", most(&MemoryReport::peak_rss)}};
}

// The most elements one gather brings in: a whole block untiled, one tile of the fc matrix tiled (or wte).
int64_t largest_unit(const gpt::ParamTable& table) {
  int64_t most = 0;
  for (const gpt::UnitInfo& unit : table.units) most = std::max(most, unit.numel);
  return most;
}

int run(gpt::comm::MpiSession& session, int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, o)) return 0;
  gpt::cpu::set_num_threads(o.threads);
  const std::unique_ptr<gpt::comm::Communicator> world = session.world(gpt::comm::MpiOptions{});
  const bool talk = world->rank() == 0;
  const gpt::ZeroConfig zero = zero_config(o);
  if (std::string problem = gpt::first_problem(zero.offload.problems(zero, o.config, world->size()));
      !problem.empty())
    throw gpt::UsageError(problem);
  const auto built = Clock::now();
  gpt::ZeroEngine engine(o.config, zero, o.batch, *world, 1);
  const double init_s = std::chrono::duration<double>(Clock::now() - built).count();
  nlohmann::json steps = time_steps(engine, *world, o, talk);
  const std::vector<MemoryReport> memory = gather_memory(*world, rank_memory(engine));
  if (!talk) return 0;
  nlohmann::json line = {{"bench", "offload_train"},
                         {"layers", o.config.num_layers},
                         {"hidden", o.config.hidden},
                         {"heads", o.config.heads},
                         {"vocab", o.config.vocab},
                         {"seq", o.config.seq_len},
                         {"batch", o.batch},
                         {"params", engine.table().total},
                         {"largest_unit_elements", largest_unit(engine.table())},
                         {"precision", o.fp16 ? "fp16" : "fp32"},
                         {"checkpoint_activations", o.checkpoint},
                         {"tile_factor", o.tile_factor},
                         {"world_size", world->size()},
                         {"threads", o.threads},
                         {"offload_optimizer", o.offload_optimizer},
                         {"offload_param", o.offload_param},
                         {"sub_group_size", o.sub_group_size},
                         {"buffer_count", o.buffer_count},
                         {"reduce_bucket_size", o.reduce_bucket_size},
                         {"init_s", init_s},
                         {"steps", std::move(steps)}};
  line.update(memory_json(memory));
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
