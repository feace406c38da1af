// bench/activations: activation memory per tensor-parallel rank and step time, for no recomputation,
// selective and full, on one tensor-parallel group of t ranks (run under `mpiexec -n t`; the world is the
// group, its collectives go through CommTensorGroup). For each granularity it builds a layer loop over its
// own arena, then times forward + backward steps, the granularities taking turns within every round so that
// they see the same machine. It prints, per granularity, the bytes the arena's "activations" category holds
// (measured), the restated formula (train/activation_formulas.h: what the loop stores, fp32, masks
// regenerated), the paper's formula (2 bytes per activation, 1 per mask) and the median step, as a table on
// stderr and one JSON line each on stdout (rank 0). bench/activations.sh runs t = 1, 2, 4 with and without
// sequence parallelism and puts them side by side.
//   mpiexec -n 4 bazel-bin/bench/activations --sequence-parallel --threads 1 --steps 3
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "base/flags.h"
#include "base/user_error.h"
#include "comm/mpi_main.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/threads.h"
#include "model/init.h"
#include "model/loop.h"
#include "train/activation_formulas.h"
#include "train/model_flags.h"
#include "zero/tensor_group.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  gpt::GPTConfig config;
  int batch = 1, steps = 5, warmup = 1, threads = 2;
  std::string recompute = "none,selective,full";
  bool sequence_parallel = false;
  double dropout = 0.1;
};

gpt::Recompute recompute_named(const std::string& name) {
  if (name == "none") return {};
  if (name == "selective") return gpt::Recompute::selective();
  if (name == "full") return gpt::Recompute::full();
  throw gpt::UsageError("--recompute names '" + name +
                        "'; use a comma-separated list of none, selective, full");
}

std::vector<std::string> split_commas(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) out.push_back(item);
  return out;
}

// Returns false when --help was printed. t is the world size.
bool parse(int argc, char** argv, Options& o, int t, bool talk) {
  gpt::FlagParser flags(
      "bench/activations",
      "Activation bytes per rank (arena vs formulas) and step time by recomputation; run under "
      "mpiexec -n t (one process per tensor-parallel rank).");
  gpt::add_bench_shape_flags(flags, &o.config, &o.batch, "sequences per micro-batch");
  flags.add_int("--steps", &o.steps, "timed forward+backward steps per granularity", 1, 1 << 20);
  flags.add_int("--warmup", &o.warmup, "untimed steps per granularity first", 0, 1 << 20);
  flags.add_int("--threads", &o.threads, "CPU threads per rank", 1, 1024);
  flags.add_string("--recompute", &o.recompute, "granularities to compare: none,selective,full");
  flags.add_switch("--sequence-parallel", &o.sequence_parallel, "Megatron's sequence parallelism (t > 1)");
  flags.add_double("--dropout", &o.dropout, "hidden and attention dropout (masks regenerated, never stored)",
                   0, 0.99);
  if (!flags.parse(argc, argv)) return false;
  gpt::finish_bench_shape(flags, &o.config);
  for (const std::string& name : split_commas(o.recompute)) recompute_named(name);
  if (std::string problem = gpt::tensor_slice_problem(o.config, t); !problem.empty())
    throw gpt::UsageError("mpiexec -n " + std::to_string(t) + ": " + problem +
                          "; run with a tensor-parallel size that divides them");
  if (o.sequence_parallel && t == 1) {
    if (talk)
      std::fprintf(stderr, "bench/activations: --sequence-parallel at t = 1 is off (as in Megatron)\n");
    o.sequence_parallel = false;
  }
  if (o.sequence_parallel && o.config.seq_len % t != 0)
    throw gpt::UsageError("--seq-length " + std::to_string(o.config.seq_len) + " is not divisible by t = " +
                          std::to_string(t) + " with --sequence-parallel; use a multiple of it");
  return true;
}

// This rank's slice of the whole model's initial weights, and its gradients accumulated in place.
class SlicedWeights final : public gpt::WeightSource<float>, public gpt::GradientSink<float> {
 public:
  SlicedWeights(const gpt::GPTConfig& config, gpt::TensorSlice slice, uint64_t seed)
      : table_(gpt::make_param_table(config, 1, slice)), params_(table_.total), grads_(table_.total, 0.0f) {
    const gpt::ParamTable whole_table = gpt::make_param_table(config);
    std::vector<float> whole(whole_table.total);
    gpt::init_gpt2_params(config, whole_table, seed, 0, whole_table.total, whole.data());
    for (size_t p = 0; p < table_.params.size(); ++p) {
      const gpt::ParamInfo& local = table_.params[p];
      const float* from = whole.data() + whole_table.params[p].offset;
      gpt::for_each_run(local, slice, [&](int64_t l, int64_t f, int64_t n) {
        std::memcpy(params_.data() + local.offset + l, from + f, n * sizeof(float));
      });
    }
  }
  void begin_pass(gpt::Pass, const std::vector<int>&) override {}
  gpt::WeightView acquire(int unit) override { return params_.data() + table_.units[unit].offset; }
  void release(int) override {}
  float* open(int unit) override { return grads_.data() + table_.units[unit].offset; }
  void ready(int) override {}

 private:
  gpt::ParamTable table_;
  std::vector<float> params_, grads_;
};

// One granularity: its loop over its own arena, and what the steps measured.
struct Run {
  std::string name;
  gpt::Recompute recompute;
  std::unique_ptr<gpt::Arena> arena;
  std::unique_ptr<gpt::LayerLoop<float>> loop;
  std::vector<double> step_s;
  double loss = 0;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

gpt::Arena::CategoryUsage activations_usage(const gpt::Arena& arena) {
  for (const auto& usage : arena.usage_by_category())
    if (usage.category == "activations") return usage;
  return {};
}

// Every granularity's step in turn, `rounds` times; the group's step is timed between barriers.
void run_rounds(std::vector<Run>& runs, SlicedWeights& weights, gpt::comm::Communicator& world,
                const Options& o, int rounds, bool timed, bool talk) {
  const int n = o.batch * o.config.seq_len;
  std::vector<int32_t> inputs(n), targets(n);
  for (int i = 0; i < n; ++i) {
    inputs[i] = int32_t((int64_t(i) * 7919 + 13) % o.config.vocab);
    targets[i] = int32_t((int64_t(i) * 104729 + 7) % o.config.vocab);
  }
  std::vector<int64_t> windows(o.batch);
  for (int b = 0; b < o.batch; ++b) windows[b] = b;
  const gpt::Dropout dropout{o.dropout, o.dropout, 1234, windows.data()};
  for (int round = 0; round < rounds; ++round) {
    for (Run& run : runs) {
      world.barrier().wait();
      const auto start = Clock::now();
      run.loss = run.loop->forward(weights, inputs.data(), targets.data(), dropout, true);
      run.loop->backward(weights, weights, 1.0f);
      world.barrier().wait();
      const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      if (timed) run.step_s.push_back(seconds);
      if (talk)
        std::fprintf(stderr, "  %s %s step: %.2f s, loss %.6f\n", timed ? "timed" : "warm-up",
                     run.name.c_str(), seconds, run.loss);
    }
  }
}

nlohmann::json report(const Run& run, const Options& o, int t) {
  const gpt::ActivationShape shape = gpt::activation_shape(o.config, o.batch);
  const gpt::ActivationSetup setup{t, o.sequence_parallel, run.recompute};
  const gpt::RestatedActivations restated = gpt::restated_activations(shape, setup);
  const gpt::Arena::CategoryUsage usage = activations_usage(*run.arena);
  const double paper = gpt::paper_model_bytes(shape, setup);
  return {{"bench", "activations"},
          {"t", t},
          {"sequence_parallel", o.sequence_parallel},
          {"recompute", run.name},
          {"layers", o.config.num_layers},
          {"hidden", o.config.hidden},
          {"heads", o.config.heads},
          {"seq", o.config.seq_len},
          {"micro_batch", o.batch},
          {"threads_per_rank", o.threads},
          {"measured_bytes", usage.current_bytes},
          {"measured_peak_bytes", usage.peak_bytes},
          {"loop_bytes", run.loop->activation_bytes()},
          {"restated_bytes", restated.total_bytes},
          {"restated_layers_bytes", restated.bytes_of("layers")},
          {"restated_input_output_bytes", restated.bytes_of("input/output")},
          {"restated_working_bytes", restated.bytes_of("working")},
          {"paper_bytes", paper},
          {"paper_layers_bytes", double(shape.L) * gpt::paper_layer_bytes(shape, setup)},
          {"measured_over_restated", double(usage.current_bytes) / double(restated.total_bytes)},
          {"measured_over_paper", double(usage.current_bytes) / paper},
          {"loss", run.loss},
          {"step_s", run.step_s},
          {"median_step_s", median(run.step_s)}};
}

void print_table(const std::vector<nlohmann::json>& lines) {
  const double MiB = 1 << 20;
  std::fprintf(stderr, "%-3s %-3s %-10s %12s %12s %10s %12s %9s %10s %9s\n", "t", "SP", "recompute",
               "measured MiB", "restated MiB", "meas/rest", "paper MiB", "meas/pap", "median s", "loss");
  for (const nlohmann::json& l : lines) {
    std::fprintf(stderr, "%-3d %-3s %-10s %12.1f %12.1f %10.4f %12.1f %9.3f %10.2f %9.6f\n",
                 l["t"].get<int>(), l["sequence_parallel"].get<bool>() ? "on" : "off",
                 l["recompute"].get<std::string>().c_str(), l["measured_bytes"].get<double>() / MiB,
                 l["restated_bytes"].get<double>() / MiB, l["measured_over_restated"].get<double>(),
                 l["paper_bytes"].get<double>() / MiB, l["measured_over_paper"].get<double>(),
                 l["median_step_s"].get<double>(), l["loss"].get<double>());
  }
}

void bench(gpt::comm::Communicator& world, const Options& o) {
  const int t = world.size();
  const bool talk = world.rank() == 0;
  gpt::Arena group_device, wire("wire", gpt::Arena::kUnlimited, &gpt::cpu_ops().wire_memory());
  gpt::EventLog events(false);
  gpt::CommTensorGroup group(world, gpt::EngineContext{gpt::cpu_ops(), group_device, wire, events});
  const gpt::TensorParallel tp{t > 1 ? &group : nullptr, o.sequence_parallel};
  SlicedWeights weights(o.config, tp.slice(), 42);
  std::vector<Run> runs;
  for (const std::string& name : split_commas(o.recompute)) {
    Run run{name, recompute_named(name), std::make_unique<gpt::Arena>("activations " + name)};
    run.loop = std::make_unique<gpt::LayerLoop<float>>(o.config, o.batch, run.recompute, gpt::cpu_ops(),
                                                       *run.arena, 1, tp);
    runs.push_back(std::move(run));
  }
  run_rounds(runs, weights, world, o, o.warmup, false, talk);
  run_rounds(runs, weights, world, o, o.steps, true, talk);
  if (!talk) return;
  std::vector<nlohmann::json> lines;
  for (const Run& run : runs) lines.push_back(report(run, o, t));
  for (const nlohmann::json& line : lines) std::printf("%s\n", line.dump().c_str());
  print_table(lines);
  for (size_t i = 1; i < lines.size(); ++i) {
    std::fprintf(stderr, "%s / %s median step time: %.3f\n", runs[i].name.c_str(), runs[0].name.c_str(),
                 lines[i]["median_step_s"].get<double>() / lines[0]["median_step_s"].get<double>());
  }
}

}  // namespace

int main(int argc, char** argv) {
  return gpt::comm::run_mpi_main("bench/activations", argc, argv, [&](gpt::comm::MpiSession& session) {
    Options o;
    if (!parse(argc, argv, o, session.world_size(), session.world_rank() == 0)) return 0;
    gpt::cpu::set_num_threads(o.threads);
    bench(*session.world(), o);
    return 0;
  });
}
