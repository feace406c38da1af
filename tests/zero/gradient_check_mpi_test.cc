// The double-precision whole-model gradient check through the ZeRO-3 weight source and gradient sink: the one
// layer loop (LayerLoop<double>) computes each rank's micro-batch on weights all-gathered unit by unit from
// fp64 shards, and its gradients go through the bucketed reduce-scatter (fp64 wire, fp64 sums) into each
// rank's shard, exactly as training does in fp32. The reduced gradient (gathered from the shards) must equal
// the single-process model's gradient of the mean loss over both ranks' batches, and a fourth-order central
// difference of the distributed loss (the mean of the ranks' losses, computed through the same source) for
// every parameter. Run at 2 ranks (about a minute).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/threads.h"
#include "model/loop.h"
#include "model/model.h"
#include "tests/comm/mpi_test_env.h"
#include "tests/model/gradient_check.h"
#include "tests/sanitized_build.h"
#include "zero/gradient_sinks.h"
#include "zero/partition.h"
#include "zero/weight_sources.h"

namespace gpt {
namespace {

constexpr int kMicroBatch = 2;

// This rank's micro-batch: different tokens on every rank.
struct Batch {
  std::vector<int32_t> inputs, targets;
};
Batch batch_of(int rank, const GPTConfig& config) {
  Batch b;
  for (int i = 0; i < kMicroBatch * config.seq_len; ++i) {
    b.inputs.push_back((i * 37 + 11 + 13 * rank) % config.vocab);
    b.targets.push_back((i * 53 + 7 + 29 * rank) % config.vocab);
  }
  return b;
}

// The ZeRO-3 machinery of the engine in fp64, around the one layer loop.
class ShardedModel {
 public:
  ShardedModel(const GPTConfig& config, const ZeroConfig& zero, comm::Communicator& dp)
      : config_(config),
        dp_(dp),
        table_(make_param_table(config)),
        partition_(table_, dp.size(), dp.size()),
        device_("device", Arena::kUnlimited, &ops_.device_memory()),
        wire_("wire", Arena::kUnlimited, &ops_.wire_memory()),
        loop_(config, kMicroBatch, zero.recompute, ops_, device_) {
    for (const UnitInfo& u : table_.units) names_.push_back(u.name);
    master_ = static_cast<double*>(device_.allocate("master", "master", shard_bytes()));
    weights_ = make_weight_source<double>({zero, partition_, names_, dp_, nullptr, context_});
    const std::vector<std::vector<int>> order{loop_.schedule().gradients};  // one segment
    gradients_ =
        make_gradient_sink<double>({zero, partition_, names_, order, dp_, nullptr, nullptr, context_});
  }

  // Every rank passes the same full model (model layout) and keeps the ranges it owns.
  void set_weights(const std::vector<double>& model_layout) {
    std::vector<double> shard(partition_.shard_total(), 0.0);
    for (int u = 0; u < int(partition_.units().size()); ++u) {
      const Partition::Range r = partition_.owned_model_range(u, dp_.rank());
      std::copy(model_layout.begin() + r.begin, model_layout.begin() + r.end,
                shard.begin() + partition_.unit(u).shard_offset);
    }
    ops_.upload(view(master_), shard.data());
    weights_->refresh(master_);
  }

  // The mean over ranks of each rank's mean loss.
  double loss(const Batch& batch, bool keep_for_backward = false) {
    double local =
        loop_.forward(*weights_, batch.inputs.data(), batch.targets.data(), Dropout{}, keep_for_backward);
    dp_.all_reduce(&local, DType::kF64, 1, 1.0f / float(dp_.size()), comm::Phase::kOther).wait();
    return local;
  }

  // The gradient of loss(), reduced over ranks and gathered from every rank's shard (model layout).
  std::vector<double> gradient(const Batch& batch) {
    gradients_->begin_step();
    loss(batch, true);
    loop_.backward(*weights_, *gradients_, 1.0);
    gradients_->end_micro_step();
    gradients_->end_step();
    return gather(gradients_->shard());
  }

  const Partition& partition() const { return partition_; }

 private:
  size_t shard_bytes() const { return partition_.shard_total() * sizeof(double); }
  Tensor view(double* data) const { return context_.view(data, partition_.shard_total(), DType::kF64); }

  std::vector<double> gather(double* shard) {
    const int64_t S = partition_.shard_total();
    std::vector<double> mine(S), all(S * dp_.size()), model(table_.total);
    ops_.download(mine.data(), view(shard));
    dp_.all_gather(mine.data(), all.data(), shard_bytes(), comm::Phase::kOther).wait();
    for (int u = 0; u < int(partition_.units().size()); ++u) {
      for (int p = 0; p < dp_.size(); ++p) {
        const Partition::Range r = partition_.owned_model_range(u, p);
        std::copy_n(all.begin() + p * S + partition_.unit(u).shard_offset, r.end - r.begin,
                    model.begin() + r.begin);
      }
    }
    return model;
  }

  GPTConfig config_;
  comm::Communicator& dp_;
  ParamTable table_;
  Partition partition_;
  std::vector<std::string> names_;
  Ops& ops_ = cpu_ops();
  Arena device_, wire_;
  EventLog events_{false};
  EngineContext context_{ops_, device_, wire_, events_};
  LayerLoop<double> loop_;
  double* master_ = nullptr;
  std::unique_ptr<EngineWeights<double>> weights_;
  std::unique_ptr<EngineGradients<double>> gradients_;
};

ZeroConfig stage3_fp64(bool checkpoint_activations) {
  ZeroConfig zero;
  zero.stage = 3;
  zero.precision = DType::kF64;
  zero.overlap_comm = true;          // prefetched gathers, two reductions in flight
  zero.reduce_bucket_size = 10'000;  // four buckets: ln_f, each block (12.7k elements) alone, wpe with wte
  zero.recompute = checkpoint_activations ? Recompute::full() : Recompute{};
  return zero;
}

// The single-process model's gradient of the mean loss over every rank's batch.
std::vector<double> reference_gradient(GPT2<double>& model, int world_size) {
  model.zero_grad();
  for (int r = 0; r < world_size; ++r) {
    const Batch b = batch_of(r, model.config());
    model.forward(b.inputs.data(), b.targets.data());
    model.backward(1.0 / world_size);
  }
  return model.grads;
}

// The tiny model with its norms and biases perturbed (gradient_check.h); one thread, as the model is tiny.
std::unique_ptr<GPT2<double>> checked_model(const GPTConfig& config) {
  cpu::set_num_threads(1);
  auto model = std::make_unique<GPT2<double>>(config, kMicroBatch);
  model->init(1234);
  test::perturb_norms_and_biases(*model);
  return model;
}

TEST_CASE("ZeRO-3 in fp64: the sharded loop's reduced gradients equal the single-process model's") {
  comm::Communicator& world = comm::testing::world();
  const GPTConfig config = test::tiny_config();
  const std::unique_ptr<GPT2<double>> made = checked_model(config);
  GPT2<double>& model = *made;
  const std::vector<double> expected = reference_gradient(model, world.size());
  for (bool checkpoint : {false, true}) {
    ShardedModel sharded(config, stage3_fp64(checkpoint), world);
    sharded.set_weights(model.params);
    const comm::TrafficCounts before = world.meter().snapshot();
    const std::vector<double> got = sharded.gradient(batch_of(world.rank(), config));
    const comm::TrafficCounts moved = world.meter().snapshot() - before;
    // The weights came by gather in both passes, the gradients by reduce-scatter.
    CHECK(moved.at(comm::Phase::kParamGatherFwd) > 0);
    CHECK(moved.at(comm::Phase::kParamGatherBwd) > 0);
    CHECK(moved.at(comm::Phase::kGradReduce) > 0);
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double error = std::fabs(got[i] - expected[i]);
      worst = std::max(worst, error / std::max(std::fabs(expected[i]), 1e-6));
    }
    if (world.rank() == 0) {
      std::printf("checkpoint_activations %d: worst relative difference from the single-process model %.3g\n",
                  int(checkpoint), worst);
    }
    CHECK(worst < 1e-10);
  }
}

TEST_CASE("ZeRO-3 in fp64: the sharded loop's gradients match central differences of the sharded loss") {
  comm::Communicator& world = comm::testing::world();
  const GPTConfig config = test::tiny_config();
  const std::unique_ptr<GPT2<double>> made = checked_model(config);
  GPT2<double>& model = *made;
  ShardedModel sharded(config, stage3_fp64(false), world);
  const Batch batch = batch_of(world.rank(), config);
  sharded.set_weights(model.params);
  const std::vector<double> analytic = sharded.gradient(batch);
  // Every rank perturbs the same element in the same order, and the owner's shard carries it. Every element;
  // every 41st of each tensor in a sanitized build (each costs a sharded forward over MPI, and the sanitizers
  // look at the code each forward runs, which is the same for every element).
  const int64_t stride = test::sampled_stride(1, 41);
  const auto stats = test::check_model_gradients(
      model, analytic,
      [&] {
        sharded.set_weights(model.params);
        return sharded.loss(batch);
      },
      stride);
  if (world.rank() == 0) {
    std::printf(
        "sharded gradient check at %d ranks: %d parameters (%d with |g| > 1e-6), worst relative error %.3g, "
        "worst absolute error elsewhere %.3g\n",
        world.size(), stats.checked, stats.large, stats.worst_rel, stats.worst_abs);
  }
  CHECK(stats.checked == test::elements_checked(model.table(), stride));
  CHECK(stats.large > stats.checked / 2);
}

}  // namespace
}  // namespace gpt
