// bench/zeropp: under mpiexec, trains N steps of ZeRO-3, of each ZeRO++ optimization alone (qwZ, hpZ with h =
// ranks per node, qgZ) and of all three together, from the same initial weights and batches, and prints one
// JSON line per configuration: bytes per step by link and phase (summed over ranks), tokens/s, the final
// training loss and, with --valid-data-path, the validation loss. --curves-dir saves each run's loss curve.
//   mpiexec -n 4 bazel-bin/bench/zeropp --num-layers 4 --hidden-size 256 --num-attention-heads 8 \
//     --seq-length 64 --micro-batch-size 4 --fp16 --ranks-per-node 2 --data-path D --steps 20
// Every gpt_train flag for the model, data, precision and topology is accepted; the bench adds --steps,
// --configs, --valid-data-path, --eval-interval, --eval-iters and --curves-dir.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "comm/mpi_communicator.h"
#include "data/loader.h"
#include "data/shard.h"
#include "kernels/cpu/threads.h"
#include "train/batches.h"
#include "train/flags.h"
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

// Takes the bench's own flags out of argv and leaves gpt_train's for parse_train_options.
std::vector<const char*> split_flags(int argc, char** argv, BenchFlags* b) {
  std::vector<const char*> rest = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw gpt::UsageError(a + " needs a value");
      return argv[++i];
    };
    auto integer = [&](int min) {
      const std::string v = value();
      try {
        const int n = std::stoi(v);
        if (n >= min) return n;
      } catch (const std::exception&) {
      }
      throw gpt::UsageError(a + " expects an integer >= " + std::to_string(min) + ", got '" + v + "'");
    };
    if (a == "--steps")
      b->steps = integer(1);
    else if (a == "--configs")
      b->configs = value();
    else if (a == "--valid-data-path")
      b->valid_data_path = value();
    else if (a == "--eval-interval")
      b->eval_interval = integer(0);
    else if (a == "--eval-iters")
      b->eval_iters = integer(1);
    else if (a == "--curves-dir")
      b->curves_dir = value();
    else
      rest.push_back(argv[i]);
  }
  return rest;
}

gpt::ZeroConfig configure(const gpt::ZeroConfig& base, const std::string& name, int ranks_per_node) {
  gpt::ZeroConfig z = base;
  z.stage = 3;
  z.quantized_weights = name == "qwz" || name == "zeropp";
  z.hpz_partition_size = name == "hpz" || name == "zeropp" ? ranks_per_node : 1;
  z.quantized_gradients = name == "qgz" || name == "zeropp";
  if (name != "zero3" && name != "qwz" && name != "hpz" && name != "qgz" && name != "zeropp") {
    throw gpt::UsageError("--configs: unknown configuration '" + name +
                          "'; choose from zero3,qwz,hpz,qgz,zeropp");
  }
  return z;
}

}  // namespace

int main(int argc, char** argv) {
  gpt::comm::MpiSession session(argc, argv);
  try {
    BenchFlags bench;
    const std::vector<const char*> rest = split_flags(argc, argv, &bench);
    gpt::TrainOptions o;
    if (!gpt::parse_train_options(int(rest.size()), rest.data(), session.world_size(), &o)) return 0;
    gpt::comm::MpiOptions mpi;
    mpi.ranks_per_node = o.ranks_per_node;
    auto world = session.world(mpi);
    if (o.threads > 0) gpt::cpu::set_num_threads(o.threads);
    const bool rank0 = world->rank() == 0;
    const int L = world->topology().ranks_per_node, T = o.model.seq_len;
    std::unique_ptr<gpt::data::ValidLoader> valid;
    if (!bench.valid_data_path.empty()) {
      valid = std::make_unique<gpt::data::ValidLoader>(gpt::data::expand_data_path(bench.valid_data_path),
                                                       o.model.vocab, T);
    }
    std::stringstream names(bench.configs);
    for (std::string name; std::getline(names, name, ',');) {
      const gpt::ZeroConfig z = configure(o.zero, name, L);
      if (std::string problem = gpt::ZeroEngine::check_zeropp(z, world->topology()); !problem.empty()) {
        throw gpt::UsageError(name + ": " + problem);
      }
      gpt::ZeroEngine engine(o.model, z, o.micro_batch, *world, uint64_t(o.seed));
      gpt::TrainBatches batches(o.data_path, o.model.vocab, T, o.micro_batch, o.accumulation_steps, *world,
                                uint64_t(o.seed));
      gpt::StepTraffic traffic(*world);
      gpt::comm::TrafficCounts total;
      nlohmann::ordered_json curve = nlohmann::ordered_json::array();
      double seconds = 0, loss = 0, val_loss = -1;
      for (int step = 1; step <= bench.steps; ++step) {
        const auto start = std::chrono::steady_clock::now();
        const gpt::ZeroEngine::StepResult r =
            engine.train_step(batches.at(step - 1), o.schedule.at(engine.applied_steps()));
        seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        total += traffic.collect();
        loss = r.loss;
        nlohmann::ordered_json point = {{"step", step},           {"loss", r.loss},
                                        {"grad_norm", r.grad_norm}, {"loss_scale", r.loss_scale},
                                        {"skipped", r.skipped}};
        const bool evaluate =
            valid && ((bench.eval_interval > 0 && step % bench.eval_interval == 0) || step == bench.steps);
        if (evaluate) {
          val_loss = gpt::validation_loss(engine, *valid, o.micro_batch, T, bench.eval_iters, *world);
          point["val_loss"] = val_loss;
        }
        curve.push_back(point);
      }
      if (!rank0) continue;
      nlohmann::ordered_json line;
      line["config"] = name;
      line["bytes_inter_node_per_step"] = double(total.total(gpt::comm::Link::kInterNode)) / bench.steps;
      line["bytes_intra_node_per_step"] = double(total.total(gpt::comm::Link::kIntraNode)) / bench.steps;
      nlohmann::ordered_json phases;
      for (int p = 0; p < gpt::comm::kNumPhases; ++p) {
        const auto phase = gpt::comm::Phase(p);
        phases[gpt::comm::phase_name(phase)] = {
            {"intra", double(total.at(phase, gpt::comm::Link::kIntraNode)) / bench.steps},
            {"inter", double(total.at(phase, gpt::comm::Link::kInterNode)) / bench.steps}};
      }
      line["bytes_by_phase"] = phases;
      line["tokens_per_s"] = double(o.global_batch) * T * bench.steps / seconds;
      line["final_loss"] = loss;
      if (valid) line["val_loss"] = val_loss;
      std::printf("%s\n", line.dump().c_str());
      std::fflush(stdout);
      if (!bench.curves_dir.empty()) {
        const std::string path = bench.curves_dir + "/" + name + ".json";
        std::ofstream out(path + ".tmp");
        out << curve.dump(1) << "\n";
        out.close();
        if (!out || std::rename((path + ".tmp").c_str(), path.c_str()) != 0) {
          throw gpt::UsageError("--curves-dir " + bench.curves_dir + ": cannot write " + path);
        }
      }
    }
    return 0;
  } catch (const gpt::UsageError& e) {
    std::fprintf(stderr, "bench/zeropp: %s\n", e.what());
  } catch (const gpt::data::DataError& e) {
    std::fprintf(stderr, "bench/zeropp: %s\n", e.what());
  } catch (const gpt::comm::TopologyError& e) {
    std::fprintf(stderr, "bench/zeropp: %s\n", e.what());
  }
  return 2;
}
