// bench/zeropp: under mpiexec, trains N steps of ZeRO-3, of each ZeRO++ optimization alone (qwZ, hpZ with h =
// ranks per node, qgZ) and of all three together, from the same initial weights and batches, and prints one
// JSON line per configuration: bytes per step by link and phase (summed over ranks), tokens/s, the final
// training loss and, with --valid-data-path, the validation loss. --curves-dir saves each run's loss curve.
//   mpiexec -n 4 bazel-bin/bench/zeropp --num-layers 4 --hidden-size 256 --num-attention-heads 8
//     --seq-length 64 --micro-batch-size 4 --fp16 --ranks-per-node 2 --data-path D --steps 20
// Every gpt_train flag for the model, data, precision and topology is accepted; the bench adds --steps and
// --configs and --curves-dir, and has its own --valid-data-path, --eval-interval and --eval-iters.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "base/flags.h"
#include "base/main.h"
#include "comm/mpi_main.h"
#include "data/loader.h"
#include "data/shard.h"
#include "kernels/backend.h"
#include "kernels/cpu/threads.h"
#include "train/batches.h"
#include "train/device_world.h"
#include "train/metrics.h"
#include "train/options.h"
#include "zero/engine.h"

namespace {

struct BenchFlags {
  int steps = 10;
  std::string configs = "zero3,qwz,hpz,qgz,zeropp";
  std::string valid_data_path, curves_dir;
  int eval_interval = 0, eval_iters = 10;
};

std::string configuration_names();  // of --configs, below

// Returns false when --help was printed. gpt_train's flags, then the bench's own (its --valid-data-path,
// --eval-interval and --eval-iters replace gpt_train's: other defaults, and 0 = only after the last step).
bool parse(int argc, char** argv, int world_size, gpt::TrainOptions& o, BenchFlags& b) {
  gpt::FlagParser flags(
      "bench/zeropp",
      "ZeRO-3 against each ZeRO++ optimization and all three, under mpiexec: gpt_train's model, "
      "data, precision and topology flags, and the benchmark's own.");
  gpt::TrainFlags train(flags, &o);
  flags.group("Benchmark");
  flags.add_int("--steps", &b.steps, "training steps per configuration", 1, 1 << 30);
  flags.add_string("--configs", &b.configs, "comma-separated, from " + configuration_names());
  flags.add_string("--valid-data-path", &b.valid_data_path, "validation shards (default: no validation)");
  flags.add_int("--eval-interval", &b.eval_interval, "validation every N steps (0: after the last step only)",
                0, 1 << 30);
  flags.add_int("--eval-iters", &b.eval_iters, "validation batches per evaluation", 1, 1 << 30);
  flags.add_string("--curves-dir", &b.curves_dir, "write each configuration's loss curve to DIR/NAME.json");
  if (!flags.parse(argc, argv)) return false;
  train.finish(world_size);
  return true;
}

// The configurations --configs chooses from: ZeRO-3, each ZeRO++ optimization alone, all three, and all three
// with LoCo's error feedback or with int8 gradients inside the node (err_beta and reset_T come from the
// JSON's zeropp_loco_param when it has one).
struct Configuration {
  const char* name;
  bool qwz, hpz, qgz;
  int intra_node_gradient_bits;
  bool loco;
};
constexpr Configuration kConfigurations[] = {
    {"zero3", false, false, false, 4, false},        {"qwz", true, false, false, 4, false},
    {"hpz", false, true, false, 4, false},           {"qgz", false, false, true, 4, false},
    {"zeropp", true, true, true, 4, false},          {"zeropp_loco", true, true, true, 4, true},
    {"zeropp_int8intra", true, true, true, 8, false}};

std::string configuration_names() {
  std::string names;
  for (const Configuration& c : kConfigurations) names += (names.empty() ? "" : ",") + std::string(c.name);
  return names;
}

gpt::ZeroConfig configure(const gpt::ZeroConfig& base, const std::string& name, int ranks_per_node) {
  for (const Configuration& c : kConfigurations) {
    if (name != c.name) continue;
    gpt::ZeroConfig z = base;
    z.stage = 3;
    z.quantized_weights = c.qwz;
    z.hpz_partition_size = c.hpz ? ranks_per_node : 1;
    z.quantized_gradients = c.qgz;
    z.intra_node_gradient_bits = c.intra_node_gradient_bits;
    z.loco = c.loco;
    return z;
  }
  throw gpt::UsageError("--configs: unknown configuration '" + name + "'; choose from " +
                        configuration_names());
}

// One configuration's run: the curve of every step, and the line rank 0 prints.
struct Result {
  nlohmann::ordered_json curve = nlohmann::ordered_json::array();
  nlohmann::ordered_json line;
};

nlohmann::ordered_json bytes_by_phase(const gpt::comm::TrafficCounts& total, int steps) {
  nlohmann::ordered_json phases;
  for (int p = 0; p < gpt::comm::kNumPhases; ++p) {
    const auto phase = gpt::comm::Phase(p);
    phases[gpt::comm::phase_name(phase)] = {
        {"intra", double(total.at(phase, gpt::comm::Link::kIntraNode)) / steps},
        {"inter", double(total.at(phase, gpt::comm::Link::kInterNode)) / steps}};
  }
  return phases;
}

Result run_config(gpt::comm::Communicator& world, const gpt::TrainOptions& o, const BenchFlags& bench,
                  const std::string& name, const gpt::data::ValidLoader* valid, gpt::Ops* backend) {
  const int T = o.model.seq_len;
  const gpt::ZeroConfig z = configure(o.zero, name, world.topology().ranks_per_node);
  if (std::string problem = gpt::first_problem(z.problems(world.topology())); !problem.empty()) {
    throw gpt::UsageError(name + ": " + problem);
  }
  gpt::ZeroEngine engine(o.model, z, o.micro_batch, world, uint64_t(o.seed), backend);
  gpt::TrainBatches batches(o.data_path, o.model.vocab, T, o.micro_batch, o.accumulation_steps, world,
                            uint64_t(o.seed));
  gpt::StepTraffic traffic(world);
  gpt::comm::TrafficCounts total;
  Result result;
  double seconds = 0, loss = 0, val_loss = -1;
  for (int step = 1; step <= bench.steps; ++step) {
    const bool evaluates =
        valid && ((bench.eval_interval > 0 && step % bench.eval_interval == 0) || step == bench.steps);
    // As gpt_train: a step followed straight by the next lets stage 3 send that one's first gather early.
    const auto next = step < bench.steps && !evaluates ? gpt::ZeroEngine::NextCall::kTrainStep
                                                       : gpt::ZeroEngine::NextCall::kUnknown;
    const auto start = std::chrono::steady_clock::now();
    const gpt::ZeroEngine::StepResult r =
        engine.train_step(batches.at(step - 1), o.schedule.at(engine.applied_steps()), false, next);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    total += traffic.collect();
    loss = r.loss;
    nlohmann::ordered_json point = {{"step", step},
                                    {"loss", r.loss},
                                    {"grad_norm", r.grad_norm},
                                    {"loss_scale", r.loss_scale},
                                    {"skipped", r.skipped}};
    if (evaluates) {
      val_loss = gpt::validation_loss(engine, *valid, o.micro_batch, T, bench.eval_iters, world);
      point["val_loss"] = val_loss;
    }
    result.curve.push_back(point);
  }
  nlohmann::ordered_json& line = result.line;
  line["config"] = name;
  line["device"] = o.device;
  line["bytes_inter_node_per_step"] = double(total.total(gpt::comm::Link::kInterNode)) / bench.steps;
  line["bytes_intra_node_per_step"] = double(total.total(gpt::comm::Link::kIntraNode)) / bench.steps;
  line["bytes_by_phase"] = bytes_by_phase(total, bench.steps);
  line["tokens_per_s"] = double(o.global_batch) * T * bench.steps / seconds;
  line["final_loss"] = loss;
  if (valid) line["val_loss"] = val_loss;
  return result;
}

void write_curve(const std::string& dir, const std::string& name, const nlohmann::ordered_json& curve) {
  const std::string path = dir + "/" + name + ".json";
  std::ofstream out(path + ".tmp");
  out << curve.dump(1) << "\n";
  out.close();
  if (!out || std::rename((path + ".tmp").c_str(), path.c_str()) != 0) {
    throw gpt::UsageError("--curves-dir " + dir + ": cannot write " + path);
  }
}

int run(gpt::comm::MpiSession& session, int argc, char** argv) {
  BenchFlags bench;
  gpt::TrainOptions o;
  if (!parse(argc, argv, session.world_size(), o, bench)) return 0;
  gpt::comm::MpiOptions mpi;
  mpi.ranks_per_node = o.ranks_per_node;
  mpi.comm_timeout_s = o.comm_timeout;
  auto world = session.world(mpi);
  if (o.threads > 0) gpt::cpu::set_num_threads(o.threads);
  const std::unique_ptr<gpt::Ops> backend = gpt::make_backend(o.device, world->topology().machine_rank());
  const gpt::DeviceWorld device_world =
      gpt::make_device_world(*world, backend.get(), o.comm_timeout, o.zero.offload.swaps_through_wire());
  gpt::comm::Communicator& training_world = device_world.nccl ? *device_world.nccl : *world;
  std::unique_ptr<gpt::data::ValidLoader> valid;
  if (!bench.valid_data_path.empty()) {
    valid = std::make_unique<gpt::data::ValidLoader>(gpt::data::expand_data_path(bench.valid_data_path),
                                                     o.model.vocab, o.model.seq_len);
  }
  std::stringstream names(bench.configs);
  for (std::string name; std::getline(names, name, ',');) {
    const Result result = run_config(training_world, o, bench, name, valid.get(), backend.get());
    if (world->rank() != 0) continue;
    std::printf("%s\n", result.line.dump().c_str());
    std::fflush(stdout);
    if (!bench.curves_dir.empty()) write_curve(bench.curves_dir, name, result.curve);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return gpt::comm::run_mpi_main("bench/zeropp", argc, argv,
                                 [&](gpt::comm::MpiSession& session) { return run(session, argc, argv); });
}
