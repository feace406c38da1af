// Tensor parallelism over MPI: the world's ranks form one tensor-parallel group whose collectives run
// through the communicator (zero/tensor_group.h, CommTensorGroup). Every rank also computes the whole model
// alone; the group's loss equals it within 1e-5 relative and each rank's gradient slice equals the whole
// model's elements within fp32 rounding, with and without sequence parallelism (dropout on). The meter counts
// the layers' collectives in tp_fwd and tp_bwd and nothing else, and their bytes summed over the ranks equal
// the closed form of zero/tensor_parallel_traffic.h exactly, for every recomputation.
// Through the engine, the world as t x d (zero/parallel_groups.h; 2 x 2 and 4 x 1 on 4 ranks, 2 x 1 on 2): a
// training step's bytes in every phase equal the tensor-parallel closed form plus t times the ZeRO closed
// form of one data-parallel group (zero/traffic_model.h), at ZeRO stages 0 and 3, with and without sequence
// parallelism, for every recomputation, and its losses equal those of t = 1 on the same global batch.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/mixed_precision_ops.h"
#include "kernels/cpu/threads.h"
#include "model/loop.h"
#include "model/model.h"
#include "tests/comm/mpi_test_env.h"
#include "tests/model/flat_model.h"
#include "zero/engine.h"
#include "zero/parallel_groups.h"
#include "zero/tensor_group.h"
#include "zero/tensor_parallel_traffic.h"
#include "zero/traffic_model.h"

namespace {

gpt::comm::Communicator& world() {
  return gpt::comm::testing::world();
}

constexpr int kB = 2;

// Several ranks share a few cores: kernel threads would only wait for each other.
struct OneThread {
  OneThread() { gpt::cpu::set_num_threads(1); }
} one_thread;

struct Result {
  float loss = 0;
  std::vector<float> grads;
};

// One forward and backward with dropout on; group null: the whole model.
Result run(gpt::LayerLoop<float>& loop, std::vector<float> params) {
  const gpt::GPTConfig config = gpt::test::small_parallel_model();
  std::vector<int32_t> x(kB * config.seq_len), y(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = int32_t((i * 37 + 11) % config.vocab);
    y[i] = int32_t((i * 53 + 7) % config.vocab);
  }
  const int64_t windows[kB] = {3, 4};
  gpt::test::FlatSlices slices(loop.table(), std::move(params));
  Result r;
  r.loss = loop.forward(slices, x.data(), y.data(), gpt::Dropout{0.1, 0.1, 5, windows}, true);
  loop.backward(slices, slices, 1.0f);
  r.grads = slices.grads;
  return r;
}

}  // namespace

TEST_CASE("the world as one tensor-parallel group equals the whole model") {
  const int t = world().size();
  const gpt::GPTConfig config = gpt::test::small_parallel_model();
  gpt::GPT2<float> init(config, kB);
  init.init(21);
  gpt::Arena whole_arena;
  gpt::LayerLoop<float> whole_loop(config, kB, gpt::Recompute{}, gpt::cpu_ops(), whole_arena);
  const Result whole = run(whole_loop, init.params);
  const gpt::ParamTable& whole_table = whole_loop.table();

  for (bool sequence_parallel : {false, true}) {
    CAPTURE(sequence_parallel);
    gpt::Arena device, wire("wire", gpt::Arena::kUnlimited, &gpt::cpu_ops().wire_memory());
    gpt::EventLog events(false);
    gpt::CommTensorGroup group(world(), gpt::EngineContext{gpt::cpu_ops(), device, wire, events});
    gpt::LayerLoop<float> loop(config, kB, gpt::Recompute::selective(), gpt::cpu_ops(), device, 1,
                               gpt::TensorParallel{&group, sequence_parallel});
    const gpt::TensorSlice slice{t, world().rank()};
    const gpt::comm::TrafficCounts before = world().meter().snapshot();
    const Result tp = run(loop, gpt::test::slice_weights(init.params, whole_table, loop.table()));
    const gpt::comm::TrafficCounts used = world().meter().snapshot() - before;

    CHECK(std::abs(tp.loss - whole.loss) <= 1e-5 * std::abs(whole.loss));
    double diff = 0, norm = 0;
    for (size_t p = 0; p < whole_table.params.size(); ++p) {
      const gpt::ParamInfo& local = loop.table().params[p];
      gpt::for_each_run(local, slice, [&](int64_t l, int64_t f, int64_t n) {
        for (int64_t i = 0; i < n; ++i) {
          const double a = tp.grads[local.offset + l + i],
                       b = whole.grads[whole_table.params[p].offset + f + i];
          diff += (a - b) * (a - b);
          norm += b * b;
        }
      });
    }
    CHECK(std::sqrt(diff / norm) < 2e-5);
    using gpt::comm::Phase;
    CHECK(used.at(Phase::kTpFwd) > 0);
    CHECK(used.at(Phase::kTpBwd) > 0);
    CHECK(used.total() == used.at(Phase::kTpFwd) + used.at(Phase::kTpBwd));
  }
}

TEST_CASE("the tensor-parallel bytes of a forward and backward equal their closed form") {
  using gpt::Recompute;
  using gpt::RecomputeMethod;
  using gpt::comm::Phase;
  const gpt::GPTConfig config = gpt::test::small_parallel_model();
  gpt::GPT2<float> init(config, kB);
  init.init(21);
  gpt::Arena whole_arena;
  const gpt::ParamTable whole_table =
      gpt::LayerLoop<float>(config, kB, Recompute{}, gpt::cpu_ops(), whole_arena).table();
  const Recompute recomputes[] = {
      Recompute{}, Recompute::selective(), Recompute::full(RecomputeMethod::kUniform, 1),
      Recompute::full(RecomputeMethod::kUniform, 2), Recompute::full(RecomputeMethod::kBlock, 1)};
  for (bool sequence_parallel : {false, true}) {
    for (const Recompute& recompute : recomputes) {
      CAPTURE(sequence_parallel);
      CAPTURE(recompute.describe());
      gpt::Arena device, wire("wire", gpt::Arena::kUnlimited, &gpt::cpu_ops().wire_memory());
      gpt::EventLog events(false);
      gpt::CommTensorGroup group(world(), gpt::EngineContext{gpt::cpu_ops(), device, wire, events});
      gpt::LayerLoop<float> loop(config, kB, recompute, gpt::cpu_ops(), device, 1,
                                 gpt::TensorParallel{&group, sequence_parallel});
      const gpt::comm::TrafficCounts before = world().meter().snapshot();
      run(loop, gpt::test::slice_weights(init.params, whole_table, loop.table()));
      const gpt::comm::TrafficCounts measured =
          gpt::comm::sum_over_ranks(world(), world().meter().snapshot() - before);

      gpt::TensorTrafficInput input;
      input.model = config;
      input.micro_batch = kB;
      input.tensor_parallel = world().size();
      input.sequence_parallel = sequence_parallel;
      input.recompute = recompute;
      const gpt::comm::TrafficCounts expected = gpt::expected_tensor_parallel_traffic(input);
      INFO("measured: ", measured.describe());
      INFO("expected: ", expected.describe());
      CHECK(measured.at(Phase::kTpFwd) == expected.at(Phase::kTpFwd));
      CHECK(measured.at(Phase::kTpBwd) == expected.at(Phase::kTpBwd));
      CHECK(measured.at(Phase::kActGather) == 0);
      CHECK(measured.bytes == expected.bytes);  // every phase and link class, byte for byte
    }
  }
}

namespace {

gpt::TensorTrafficInput traffic_input(int t, bool sequence_parallel, const gpt::Recompute& recompute) {
  gpt::TensorTrafficInput in;
  in.model = gpt::test::small_parallel_model();
  in.micro_batch = kB;
  in.tensor_parallel = t;
  in.sequence_parallel = sequence_parallel;
  in.recompute = recompute;
  return in;
}

}  // namespace

TEST_CASE("the closed form: linear in the groups and the micro-steps, zero at t = 1, Megatron's totals") {
  using gpt::Recompute;
  using gpt::comm::Link;
  using gpt::comm::Phase;
  const Recompute full = Recompute::full();
  for (bool sequence_parallel : {false, true}) {
    CAPTURE(sequence_parallel);
    gpt::TensorTrafficInput in = traffic_input(2, sequence_parallel, full);
    in.distribute_saved_activations = true;
    const gpt::comm::TrafficCounts one = gpt::expected_tensor_parallel_traffic(in);
    in.data_parallel = 3;
    in.accumulation_steps = 5;
    const gpt::comm::TrafficCounts many = gpt::expected_tensor_parallel_traffic(in);
    for (int p = 0; p < gpt::comm::kNumPhases; ++p) {
      CHECK(many.bytes[p][0] == 15 * one.bytes[p][0]);
      CHECK(many.bytes[p][1] == 0);  // tensor-parallel groups live inside one node
    }
    in.tensor_parallel = 1;
    CHECK(gpt::expected_tensor_parallel_traffic(in).total() == 0);
  }
  // Shapes the collectives cannot split (the hidden size 64 by 3; with sequence parallelism 16 positions by
  // 32).
  CHECK_THROWS_AS(gpt::expected_tensor_parallel_traffic(traffic_input(3, false, {})), std::invalid_argument);
  CHECK_THROWS_AS(gpt::expected_tensor_parallel_traffic(traffic_input(32, true, {})), std::invalid_argument);
  CHECK_NOTHROW(gpt::expected_tensor_parallel_traffic(traffic_input(32, false, {})));

  // No recomputation, per micro-step and group (B T C elements of the residual stream, fp32): Megatron's four
  // all-reduces per block (two in the forward, two in the backward) plus the embedding's and the head's; with
  // sequence parallelism each all-reduce becomes an all-gather and a reduce-scatter of the same bytes, the
  // backward gathers each column-parallel input again, and the LayerNorms' [2C] gradients are all-reduced.
  const gpt::GPTConfig c = gpt::test::small_parallel_model();
  const uint64_t L = c.num_layers, E = uint64_t(kB) * c.seq_len * c.hidden, BT = uint64_t(kB) * c.seq_len;
  for (uint64_t t : {2, 4}) {
    CAPTURE(t);
    const uint64_t residual = (t - 1) * E * 4, stats = t * (t - 1) * BT * 3 * 4;
    const gpt::comm::TrafficCounts plain =
        gpt::expected_tensor_parallel_traffic(traffic_input(int(t), false, {}));
    CHECK(plain.at(Phase::kTpFwd) == (2 * L + 1) * 2 * residual + stats);
    CHECK(plain.at(Phase::kTpBwd) == (2 * L + 1) * 2 * residual);
    const gpt::comm::TrafficCounts sp =
        gpt::expected_tensor_parallel_traffic(traffic_input(int(t), true, {}));
    CHECK(sp.at(Phase::kTpFwd) == (4 * L + 2) * residual + stats);
    CHECK(sp.at(Phase::kTpBwd) == (6 * L + 2) * residual + (2 * L + 1) * 2 * (t - 1) * 2 * c.hidden * 4);
    // Selective recomputation adds no collective; full uniform 1 repeats each block's forward up to the MLP
    // projection.
    CHECK(gpt::expected_tensor_parallel_traffic(traffic_input(int(t), false, Recompute::selective())) ==
          plain);
    CHECK(gpt::expected_tensor_parallel_traffic(traffic_input(int(t), false, Recompute::full()))
              .at(Phase::kTpBwd) == plain.at(Phase::kTpBwd) + L * 2 * residual);

    // Partitioned activation checkpoints: one gather of a chunk input per recomputed chunk, none when the
    // sequence is split already or nothing is checkpointed.
    for (bool sequence_parallel : {false, true}) {
      for (const Recompute& recompute : {Recompute{}, Recompute::selective(), Recompute::full()}) {
        gpt::TensorTrafficInput in = traffic_input(int(t), sequence_parallel, recompute);
        in.distribute_saved_activations = true;
        const bool gathers = recompute.is_full() && !sequence_parallel;
        CHECK(gpt::expected_tensor_parallel_traffic(in).at(Phase::kActGather, Link::kIntraNode) ==
              (gathers ? L * residual : 0));
      }
    }
  }
}

namespace {

// A step's global batch for `ranks` data-parallel ranks (or tensor-parallel groups): G = ranks x k x B
// sequences, sequence b of rank r's micro-step m being (m ranks + r) B + b. Each sequence's tokens and window
// index depend only on its place in the whole run, so any split of the same G sequences trains on the same
// data with the same dropout masks.
class StepBatches {
 public:
  StepBatches(const gpt::GPTConfig& model, int step, int micro_batch, int accumulation, int ranks, int rank) {
    const int T = model.seq_len, G = ranks * accumulation * micro_batch;
    inputs_.resize(accumulation);
    targets_.resize(accumulation);
    windows_.resize(accumulation);
    for (int m = 0; m < accumulation; ++m) {
      for (int b = 0; b < micro_batch; ++b) {
        const int64_t sequence = int64_t(step) * G + (int64_t(m) * ranks + rank) * micro_batch + b;
        const std::vector<int32_t> tokens =
            gpt::test::lcg_tokens(T + 1, model.vocab, uint32_t(977 + sequence));
        inputs_[m].insert(inputs_[m].end(), tokens.begin(), tokens.end() - 1);
        targets_[m].insert(targets_[m].end(), tokens.begin() + 1, tokens.end());
        windows_[m].push_back(sequence);
      }
    }
    for (int m = 0; m < accumulation; ++m)
      micro_.push_back({inputs_[m].data(), targets_[m].data(), windows_[m].data()});
  }
  const std::vector<gpt::ZeroEngine::MicroBatch>& micro_batches() const { return micro_; }

 private:
  std::vector<std::vector<int32_t>> inputs_, targets_;
  std::vector<std::vector<int64_t>> windows_;
  std::vector<gpt::ZeroEngine::MicroBatch> micro_;
};

constexpr int kAccumulation = 2, kSteps = 2;
const gpt::Recompute kRecomputes[] = {gpt::Recompute{}, gpt::Recompute::selective(),
                                      gpt::Recompute::full(gpt::RecomputeMethod::kUniform, 1),
                                      gpt::Recompute::full(gpt::RecomputeMethod::kUniform, 2),
                                      gpt::Recompute::full(gpt::RecomputeMethod::kBlock, 1)};
constexpr uint64_t kSeed = 31;

gpt::ZeroConfig engine_config(int stage, bool sequence_parallel, const gpt::Recompute& recompute,
                              bool distribute_saved_activations = false) {
  gpt::ZeroConfig z;
  z.distribute_saved_activations = distribute_saved_activations;
  z.stage = stage;
  z.sequence_parallel = sequence_parallel;
  z.recompute = recompute;
  z.hidden_dropout = 0.1;
  z.attention_dropout = 0.1;
  z.reduce_bucket_size = 5000;  // several gradient buckets
  z.overlap_comm = stage == 3;
  z.adam.weight_decay = 0.01;
  z.gradient_clipping = 1.0;
  return z;
}

// The losses of kSteps steps at t = 1 over the whole world, micro-batches of one sequence: the same global
// batches as `groups` tensor-parallel groups of micro-batches of kB sequences.
std::vector<double> reference_losses(int groups) {
  const gpt::GPTConfig model = gpt::test::small_parallel_model();
  const int W = world().size(), accumulation = groups * kAccumulation * kB / W;
  gpt::ZeroEngine engine(model, engine_config(0, false, {}), 1, world(), kSeed);
  std::vector<double> losses;
  for (int step = 0; step < kSteps; ++step) {
    const StepBatches batches(model, step, 1, accumulation, W, world().rank());
    losses.push_back(engine.train_step(batches.micro_batches(), 1e-3).loss);
  }
  return losses;
}

// What the meter should count in one step, summed over the world: the tensor-parallel groups' closed form,
// plus each of the t data-parallel groups' ZeRO closed form.
gpt::comm::TrafficCounts expected_step(const gpt::ZeroEngine& engine, int t, int d) {
  gpt::TensorTrafficInput tensor;
  tensor.model = engine.model();
  tensor.micro_batch = kB;
  tensor.accumulation_steps = kAccumulation;
  tensor.tensor_parallel = t;
  tensor.data_parallel = d;
  tensor.sequence_parallel = engine.config().sequence_parallel;
  tensor.recompute = engine.config().recompute;
  tensor.distribute_saved_activations = engine.config().distribute_saved_activations;
  tensor.activations = engine.compute_dtype();
  gpt::TrafficModelInput zero;
  zero.partition = &engine.partition();
  zero.zero = engine.config();
  zero.ranks_per_node = engine.data_parallel_topology().ranks_per_node;
  zero.accumulation_steps = kAccumulation;
  const gpt::comm::TrafficCounts per_group = gpt::expected_step_traffic(zero);
  gpt::comm::TrafficCounts expected = gpt::expected_tensor_parallel_traffic(tensor);
  for (int i = 0; i < t; ++i) expected += per_group;
  return expected;
}

// One training step of `engine` on `batches`: its loss, and the bytes the meter counted during it, summed
// over the world.
struct MeteredStep {
  double loss;
  gpt::comm::TrafficCounts traffic;
};
MeteredStep metered_step(gpt::ZeroEngine& engine, const StepBatches& batches) {
  const gpt::comm::TrafficCounts before = world().meter().snapshot();
  const double loss = engine.train_step(batches.micro_batches(), 1e-3).loss;
  return {loss, gpt::comm::sum_over_ranks(world(), world().meter().snapshot() - before)};
}

// Every phase and link class byte for byte, except the step's small agreement all-reduce (other).
void check_bytes_per_phase(const gpt::comm::TrafficCounts& measured,
                           const gpt::comm::TrafficCounts& expected) {
  using gpt::comm::Link;
  using gpt::comm::Phase;
  for (int p = 0; p < gpt::comm::kNumPhases; ++p) {
    if (Phase(p) == Phase::kOther) continue;
    CAPTURE(gpt::comm::phase_name(Phase(p)));
    CHECK(measured.bytes[p][int(Link::kIntraNode)] == expected.bytes[p][int(Link::kIntraNode)]);
    CHECK(measured.bytes[p][int(Link::kInterNode)] == expected.bytes[p][int(Link::kInterNode)]);
  }
}

// One step at a time through the engine on t x d ranks, at ZeRO stages 0 and 3, with and without sequence
// parallelism, for every recomputation: the step's bytes in every phase and link class (summed over the
// world) equal the closed forms, and its loss that of t = 1 on the same global batch.
void check_engine_at(int t) {
  using gpt::comm::Phase;
  const int d = world().size() / t;
  const gpt::GPTConfig model = gpt::test::small_parallel_model();
  const std::vector<double> reference = reference_losses(d);
  const gpt::ParallelGroups groups(world(), t);
  for (int stage : {0, 3}) {
    for (bool sequence_parallel : {false, true}) {
      // Every recomputation, and full recomputation's with partitioned checkpoints (no sequence parallelism).
      std::vector<std::pair<gpt::Recompute, bool>> variants;
      for (const gpt::Recompute& recompute : kRecomputes) variants.emplace_back(recompute, false);
      if (!sequence_parallel) {
        for (const gpt::Recompute& recompute : kRecomputes)
          if (recompute.is_full()) variants.emplace_back(recompute, true);
      }
      for (const auto& variant : variants) {
        const gpt::Recompute& recompute = variant.first;
        const bool distribute = variant.second;
        CAPTURE(stage);
        CAPTURE(sequence_parallel);
        CAPTURE(recompute.describe());
        CAPTURE(distribute);
        gpt::ZeroEngine engine(model, engine_config(stage, sequence_parallel, recompute, distribute), kB,
                               groups.data(), kSeed, nullptr, groups.tensor());
        const gpt::comm::TrafficCounts expected = expected_step(engine, t, d);
        for (int step = 0; step < kSteps; ++step) {
          CAPTURE(step);
          const StepBatches batches(model, step, kB, kAccumulation, d, groups.data().rank());
          const MeteredStep metered = metered_step(engine, batches);
          const double loss = metered.loss;
          const gpt::comm::TrafficCounts& measured = metered.traffic;
          INFO("measured: ", measured.describe());
          INFO("expected: ", expected.describe());
          CHECK(std::abs(loss - reference[step]) <= 1e-5 * std::abs(reference[step]));
          CHECK(measured.at(Phase::kTpFwd) > 0);
          CHECK((measured.at(Phase::kActGather) > 0) == distribute);
          if (d > 1) CHECK(measured.at(Phase::kGradReduce) > 0);  // the ZeRO phases are not vacuous
          check_bytes_per_phase(measured, expected);
        }
      }
    }
  }
}

// The half layer loop at t x d (MixedPrecisionCpuOps computes what a GPU does at --bf16): the layers'
// collectives move bf16 activations, so each step's bytes equal the closed forms at 2 bytes an activation
// (4 a softmax statistic or LayerNorm gradient partial), and the losses follow the fp32 loop's on the same
// compute weights within 2e-2 (the half loop's bound at t = 1, engine_mpi_test).
void check_half_loop_at(int t) {
  using gpt::comm::Phase;
  const int d = world().size() / t;
  const gpt::GPTConfig model = gpt::test::small_parallel_model();
  const gpt::ParallelGroups groups(world(), t);
  gpt::MixedPrecisionCpuOps mixed;
  for (int stage : {0, 3}) {
    for (bool sequence_parallel : {false, true}) {
      CAPTURE(stage);
      CAPTURE(sequence_parallel);
      gpt::ZeroConfig z = engine_config(stage, sequence_parallel, gpt::Recompute::selective());
      z.precision = gpt::DType::kBF16;
      gpt::ZeroEngine fp32_loop(model, z, kB, groups.data(), kSeed, nullptr, groups.tensor());
      gpt::ZeroEngine half_loop(model, z, kB, groups.data(), kSeed, &mixed, groups.tensor());
      REQUIRE(fp32_loop.compute_dtype() == gpt::DType::kF32);
      REQUIRE(half_loop.compute_dtype() == gpt::DType::kBF16);
      const gpt::comm::TrafficCounts expected = expected_step(half_loop, t, d);
      for (int step = 0; step < kSteps; ++step) {
        CAPTURE(step);
        const StepBatches batches(model, step, kB, kAccumulation, d, groups.data().rank());
        const double reference = fp32_loop.train_step(batches.micro_batches(), 1e-3).loss;
        const MeteredStep metered = metered_step(half_loop, batches);
        const double loss = metered.loss;
        const gpt::comm::TrafficCounts& measured = metered.traffic;
        INFO("measured: ", measured.describe());
        INFO("expected: ", expected.describe());
        CHECK(std::abs(loss - reference) <= 2e-2 * std::abs(reference));
        CHECK(measured.at(Phase::kTpFwd) > 0);
        check_bytes_per_phase(measured, expected);
      }
    }
  }
}

}  // namespace

// 2 x 1 on 2 ranks; 2 x 2 and 4 x 1 on 4 ranks (one node: the tensor-parallel groups live inside it).
TEST_CASE("the half layer loop at t x d moves bf16 activations and trains as the fp32 loop, within 2e-2") {
  for (int t : {2, 4}) {
    if (t > world().size() || world().size() % t != 0) continue;
    CAPTURE(t);
    check_half_loop_at(t);
  }
}

TEST_CASE("the engine at t x d: each step's bytes equal the closed forms, its losses those of t = 1") {
  for (int t : {2, 4}) {
    if (t > world().size() || world().size() % t != 0) continue;
    CAPTURE(t);
    check_engine_at(t);
  }
}
