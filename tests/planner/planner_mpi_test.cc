// The planner against the real engine, under `mpiexec -n 4 ... --ranks-per-node 2` (2 simulated nodes of 2):
// for a tiny model, the bytes by phase and link class of one optimizer step that the planner reports
// (make_plan, the report's own code path) equal the traffic meter's counts summed over ranks, exactly, for
// stages 0-2 and for ZeRO-3 with every combination of qwZ, hpZ and qgZ, with 1 and 2 accumulation steps. The
// planned state classes are checked against the engine's own memory lines in the same runs.
#include <doctest/doctest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "kernels/attention_residual.h"
#include "kernels/cpu/threads.h"
#include "tests/comm/mpi_test_env.h"
#include "train/activation_formulas.h"
#include "train/planner.h"
#include "zero/dry_run.h"
#include "zero/engine.h"

namespace {

using gpt::comm::Link;
using gpt::comm::Phase;

gpt::comm::Communicator& world() {
  return gpt::comm::testing::world();
}

struct OneThread {
  OneThread() { gpt::cpu::set_num_threads(1); }
} one_thread;

gpt::TrainOptions tiny_options(int stage, int accumulation) {
  const gpt::comm::Topology& t = world().topology();
  gpt::TrainOptions o;
  o.model.num_layers = 2;
  o.model.hidden = 32;
  o.model.heads = 2;
  o.model.seq_len = 16;
  o.model.max_positions = 16;
  o.model.vocab = 200;  // padded to 256
  o.micro_batch = 2;
  o.accumulation_steps = accumulation;
  o.global_batch = int64_t(o.micro_batch) * accumulation * t.world_size;
  o.zero.stage = stage;
  o.zero.precision = gpt::DType::kF16;
  o.zero.reduce_bucket_size = 3000;  // several buckets, and units larger than one
  o.zero.overlap_comm = true;
  o.zero.recompute = gpt::Recompute::full();
  o.plan.enabled = true;
  o.plan.nodes = t.num_nodes();
  o.plan.gpus_per_node = t.ranks_per_node;
  return o;
}

struct Measured {
  gpt::comm::TrafficCounts traffic;  // the last step, summed over ranks
  std::vector<gpt::ZeroEngine::MemoryLine> memory;
  std::vector<gpt::ZeroEngine::MemoryLine> memory_after;  // after the steps: with the transient buffers
  size_t hpz_secondary_peak = 0;
  bool skipped = false;
};

// Two optimizer steps on synthetic tokens; the second step's traffic (the first is the same, but the second
// shows that nothing is left over from the first).
Measured train(const gpt::TrainOptions& o, const gpt::ZeroConfig& zero) {
  const int B = o.micro_batch, T = o.model.seq_len, r = world().rank();
  gpt::ZeroEngine engine(o.model, zero, B, world(), 11);
  Measured result;
  result.memory = engine.memory();
  std::vector<std::vector<int32_t>> inputs(o.accumulation_steps, std::vector<int32_t>(size_t(B) * T));
  std::vector<std::vector<int32_t>> targets = inputs;
  std::vector<std::vector<int64_t>> windows(o.accumulation_steps, std::vector<int64_t>(B));
  gpt::comm::TrafficCounts last;
  for (int step = 0; step < 2; ++step) {
    std::vector<gpt::ZeroEngine::MicroBatch> micro_batches;
    for (int m = 0; m < o.accumulation_steps; ++m) {
      for (int i = 0; i < B * T; ++i) {
        inputs[m][i] = (r * 7919 + m * 131 + step * 31 + i * 17) % o.model.vocab;
        targets[m][i] = (inputs[m][i] * 5 + 3) % o.model.vocab;
      }
      for (int b = 0; b < B; ++b)
        windows[m][b] = ((int64_t(step) * o.accumulation_steps + m) * 64 + r) * B + b;
      micro_batches.push_back({inputs[m].data(), targets[m].data(), windows[m].data()});
    }
    const gpt::comm::TrafficCounts before = world().meter().snapshot();
    result.skipped = engine.train_step(micro_batches, 1e-3).skipped || result.skipped;
    last = world().meter().snapshot() - before;
  }
  result.memory_after = engine.memory();
  result.traffic = gpt::comm::sum_over_ranks(world(), last);
  result.hpz_secondary_peak = engine.hpz_secondary_peak_bytes();
  return result;
}

double engine_bytes(const Measured& m, const std::string& state, bool after = false) {
  for (const auto& line : after ? m.memory_after : m.memory) {
    if (line.state == state) return double(line.bytes);
  }
  return -1;
}

// The plan counts the GPU target's activations, whose attention keeps one log-sum-exp per row
// (cuda_attention_residual(), the CUDA flash kernels); the CPU engine keeps the probabilities. The difference
// of the two residuals at the plan's 2 bytes an element, 4 a log-sum-exp (no tensor parallelism here).
double residual_difference(const gpt::TrainOptions& o, const gpt::ZeroConfig& z) {
  if (gpt::cuda_attention_residual() == gpt::AttentionResidual::kProbabilities) return 0;
  const gpt::ActivationShape shape = gpt::activation_shape(o.model, o.micro_batch);
  gpt::ActivationSetup setup{1, false, z.recompute, z.distribute_saved_activations};
  const double probabilities = double(gpt::restated_activations(shape, setup, 2).total_bytes);
  setup.attention_residual = gpt::AttentionResidual::kLogSumExp;
  return probabilities - double(gpt::restated_activations(shape, setup, 2).total_bytes);
}

// The statistics the half layer loop keeps in fp32 beside its fp16 activations, at 2 bytes each: twice the
// restated count at 2 bytes an element (a statistic 4) less the count at 4 leaves 4 a statistic.
double statistics_at_2_bytes(const gpt::TrainOptions& o, const gpt::ZeroConfig& z) {
  const gpt::ActivationShape shape = gpt::activation_shape(o.model, o.micro_batch);
  const gpt::ActivationSetup setup{1, false, z.recompute, z.distribute_saved_activations};
  const int64_t half = gpt::restated_activations(shape, setup, 2).total_bytes;
  const int64_t fp32 = gpt::restated_activations(shape, setup, 4).total_bytes;
  return double(2 * half - fp32) / 2;
}

void compare(const gpt::TrainOptions& o, const gpt::PlanVariant& v) {
  const Measured m = train(o, v.zero);
  INFO(v.name << ", accumulation " << o.accumulation_steps << "\n  measured " << m.traffic.describe()
              << "\n  planned  " << v.traffic.describe());
  CHECK(v.problem.empty());
  CHECK(!m.skipped);
  for (Phase p : {Phase::kParamGatherFwd, Phase::kParamGatherBwd, Phase::kGradReduce}) {
    for (Link l : {Link::kIntraNode, Link::kInterNode}) CHECK(m.traffic.at(p, l) == v.traffic.at(p, l));
  }
  CHECK(v.traffic.total() > 0);
  // The state classes the CPU engine holds as a GPU would (its arena rounds each block up to 64 bytes).
  for (const char* state : {"compute weights", "master", "gradients"}) {
    INFO(state);
    CHECK(engine_bytes(m, state) >= v.memory.of(state));
    CHECK(engine_bytes(m, state) < v.memory.of(state) + 64);
  }
  CHECK(engine_bytes(m, "moments") >= v.memory.of("moments"));
  CHECK(engine_bytes(m, "moments") < v.memory.of("moments") + 128);
  CHECK(double(m.hpz_secondary_peak) == v.memory.of("hpZ secondary"));
  // The engine keeps fp32 activations on the CPU; the plan counts the same elements at 2 bytes (fp16) but
  // the statistics at 4, and the GPU's log-sum-exp where the CPU keeps the probabilities.
  CHECK(engine_bytes(m, "activations") ==
        2 * (v.memory.of("activations") + residual_difference(o, v.zero) - statistics_at_2_bytes(o, v.zero)));
  // The CPU backend's own count (the memory guard's): the arena's activations after two steps (each block
  // rounded up to 64 bytes), and its buffers, which the plan takes from the engine's dry run: exactly.
  const gpt::comm::Topology& t = world().topology();
  const gpt::PlanMemory cpu = gpt::plan_memory(o.model, v.zero, t.num_nodes(), t.ranks_per_node,
                                               o.micro_batch, o.accumulation_steps, gpt::MemoryTarget::kCpu);
  const double activations = engine_bytes(m, "activations", true), buffers = engine_bytes(m, "buffers", true);
  INFO("buffers measured " << buffers << ", counted " << cpu.of("buffers"));
  CHECK(activations >= cpu.of("activations"));
  CHECK(activations < cpu.of("activations") + 64 * 200);
  CHECK(buffers >= 0.8 * cpu.of("buffers"));
  CHECK(buffers <= 1.2 * cpu.of("buffers"));
  // The count is the engine's own: its dry run (zero/dry_run.h) holds what this rank's arenas held.
  CHECK(buffers == cpu.of("buffers"));
  // The restated activations (the closed form the plan prints) are what the dry run's layer loop allocated.
  const gpt::DryRunMemory dry = gpt::dry_run(gpt::DryRunSetup{
      o.model, v.zero, t.num_nodes(), t.ranks_per_node, 1, o.micro_batch, o.accumulation_steps});
  CHECK(double(dry.activation_bytes) == cpu.of("activations"));
}

}  // namespace

TEST_CASE("planned bytes by phase and link equal the meter's, for stages 0-2 and every ZeRO++ combination") {
  const gpt::comm::Topology& t = world().topology();
  if (t.num_nodes() < 2 || t.ranks_per_node < 2) {
    MESSAGE("needs 2 or more simulated nodes of 2 or more ranks (--ranks-per-node)");
    return;
  }
  int compared = 0;
  for (int accumulation : {1, 2}) {
    for (int stage : {0, 1, 2}) {
      const gpt::TrainOptions o = tiny_options(stage, accumulation);
      const gpt::Plan plan = gpt::make_plan(o);
      compare(o, plan.variants[plan.configured]);
      ++compared;
    }
    for (bool hierarchical : {false, true}) {  // zero_hierarchical_allgather: its closed form too
      gpt::TrainOptions o = tiny_options(3, accumulation);
      o.zero.hierarchical_allgather = hierarchical;
      const gpt::Plan plan = gpt::make_plan(o);
      CHECK(plan.variants.size() == 8);
      for (const gpt::PlanVariant& v : plan.variants) {
        if (v.name.find("hpz") != std::string::npos || v.name == "zeropp")
          CHECK(v.zero.hpz_partition_size == t.ranks_per_node);
        compare(o, v);
        ++compared;
      }
    }
  }
  if (world().rank() == 0) std::printf("compared %d configurations with the meter\n", compared);
}

// Memory-centric tiling: the tiled schedule's bytes (a tiled backward with checkpointing gathers most tiles
// twice) equal the meter's, and the dry run's pooled buffers (the gathered tiles and small units, the unit
// gradients) are what the engine's arena allocates.
TEST_CASE("tiled blocks (factors 2 and 4): planned bytes equal the meter's, pooled buffers the engine's") {
  const gpt::comm::Topology& t = world().topology();
  if (t.num_nodes() < 2 || t.ranks_per_node < 2) {
    MESSAGE("needs 2 or more simulated nodes of 2 or more ranks (--ranks-per-node)");
    return;
  }
  for (int factor : {2, 4}) {
    for (int stage : {2, 3}) {
      for (bool checkpoint : {true, false}) {
        gpt::TrainOptions o = tiny_options(stage, 1);
        o.model.hidden = 128;  // tiles of whole 16-row groups, 32 rows or more: hidden a multiple of 32 x 4
        o.model.heads = 4;
        o.zero.tile_factor = factor;
        o.zero.recompute = checkpoint ? gpt::Recompute::full() : gpt::Recompute{};
        const gpt::Plan plan = gpt::make_plan(o);
        const gpt::PlanVariant& v = plan.variants[plan.configured];
        INFO("tile factor " << factor << ", stage " << stage << ", checkpointing " << checkpoint);
        compare(o, v);
      }
    }
  }
}
