// A training step at one data-parallel rank (run under `mpiexec -n 1`): no collective runs on a group of one
// rank (there is nothing to exchange; the casts to the wire dtype and back stay, so the numbers are those of
// a step with the collective), and the host waits for the device only where the step must read a value back.
// The engine runs on the asynchronous checked backend (tests/seam/checked_ops.h), which queues its ops as a
// GPU stream does and counts every host synchronization, over a communicator that counts the collectives.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "comm/communicator.h"
#include "tests/comm/mpi_test_env.h"
#include "tests/seam/checked_ops.h"
#include "tests/zero/engine_harness.h"
#include "train/batches.h"

namespace gpt {
namespace {

// Every collective issued on it (or on its subgroups) is counted, then handed to the communicator inside.
class CountingCommunicator final : public comm::Communicator {
 public:
  CountingCommunicator(comm::Communicator& inner, std::shared_ptr<int64_t> count,
                       std::unique_ptr<comm::Communicator> owned = nullptr)
      : inner_(inner), count_(std::move(count)), owned_(std::move(owned)) {}
  int64_t collectives() const { return *count_; }

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  int world_rank_of(int group_rank) const override { return inner_.world_rank_of(group_rank); }
  const comm::Topology& topology() const override { return inner_.topology(); }
  comm::TrafficMeter& meter() const override { return inner_.meter(); }
  bool orders_after_device_work() const override { return inner_.orders_after_device_work(); }
  std::unique_ptr<comm::Communicator> subgroup(const std::vector<int>& world_ranks) override {
    std::unique_ptr<comm::Communicator> group = inner_.subgroup(world_ranks);
    if (!group) return nullptr;
    comm::Communicator& inner = *group;
    return std::make_unique<CountingCommunicator>(inner, count_, std::move(group));
  }
  comm::Request all_gather(const void* send, void* recv, size_t bytes, comm::Phase phase) override {
    ++*count_;
    return inner_.all_gather(send, recv, bytes, phase);
  }
  comm::Request reduce_scatter(const void* send, DType dtype, void* recv, size_t count, float scale,
                               comm::Phase phase) override {
    ++*count_;
    return inner_.reduce_scatter(send, dtype, recv, count, scale, phase);
  }
  comm::Request all_reduce(void* data, DType dtype, size_t count, float scale, comm::Phase phase) override {
    ++*count_;
    return inner_.all_reduce(data, dtype, count, scale, phase);
  }
  comm::Request all_to_all_v(const void* send, const std::vector<size_t>& send_bytes, void* recv,
                             const std::vector<size_t>& recv_bytes, comm::Phase phase) override {
    ++*count_;
    return inner_.all_to_all_v(send, send_bytes, recv, recv_bytes, phase);
  }
  comm::Request broadcast(void* data, size_t bytes, int root, comm::Phase phase) override {
    ++*count_;
    return inner_.broadcast(data, bytes, root, phase);
  }
  comm::Request barrier() override {
    ++*count_;
    return inner_.barrier();
  }

 private:
  comm::Communicator& inner_;
  std::shared_ptr<int64_t> count_;
  std::unique_ptr<comm::Communicator> owned_;  // a subgroup's communicator
};

// What one step did: its result, and the collectives and host synchronizations it issued.
struct StepRecord {
  ZeroEngine::StepResult result;
  int64_t collectives = 0;
  int64_t host_synchronizations = 0;
  int64_t release_waits = 0;
};

struct Run {
  std::vector<StepRecord> steps;
  std::vector<float> master;
};

// spec.steps steps of the engine on the asynchronous checked backend over a counting view of `world`.
Run run_counted(const GPTConfig& model, const testing::RunSpec& spec) {
  CountingCommunicator dp(comm::testing::world(), std::make_shared<int64_t>(0));
  testing::CheckedOps ops(/*asynchronous=*/true);
  TrainBatches batches(testing::synthetic_shard(model), model.vocab, model.seq_len, spec.micro_batch,
                       spec.accumulation, dp, spec.seed);
  ZeroEngine engine(model, spec.zero, spec.micro_batch, dp, spec.seed, &ops);
  Run run;
  for (int s = 0; s < spec.steps; ++s) {
    const auto& micro_batches = batches.at(s);
    const int64_t collectives = dp.collectives(), syncs = ops.host_synchronizations();
    const int64_t release_waits = ops.release_waits();
    StepRecord step;
    step.result = engine.train_step(micro_batches, spec.lr);
    step.collectives = dp.collectives() - collectives;
    step.host_synchronizations = ops.host_synchronizations() - syncs;
    step.release_waits = ops.release_waits() - release_waits;
    run.steps.push_back(step);
  }
  run.master = engine.gather_master();
  return run;
}

testing::RunSpec spec_for(int stage, DType precision) {
  testing::RunSpec spec;
  spec.zero.stage = stage;
  spec.zero.precision = precision;
  spec.zero.reduce_bucket_size = 5000;  // several buckets
  spec.zero.overlap_comm = stage == 3;
  spec.zero.gradient_clipping = 1.0;
  spec.steps = 3;
  return spec;
}

// The run's bits, printed so that runs before and after a change can be compared by hand.
std::string describe(const Run& run) {
  uint64_t hash = 1469598103934665603ull;  // FNV-1a over the master weights' bytes
  const auto* bytes = reinterpret_cast<const unsigned char*>(run.master.data());
  for (size_t i = 0; i < run.master.size() * sizeof(float); ++i) hash = (hash ^ bytes[i]) * 1099511628211ull;
  char text[160];
  std::string out;
  for (const StepRecord& s : run.steps) {
    std::snprintf(text, sizeof text, "loss %.17g norm %.17g (syncs %lld, release waits %lld); ",
                  s.result.loss, s.result.grad_norm, static_cast<long long>(s.host_synchronizations),
                  static_cast<long long>(s.release_waits));
    out += text;
  }
  std::snprintf(text, sizeof text, "master %016llx", static_cast<unsigned long long>(hash));
  return out + text;
}

TEST_CASE("one data-parallel rank: no collective in a step, the same bits as the CPU backend's run") {
  REQUIRE(comm::testing::world().size() == 1);
  const GPTConfig model = testing::tiny_model();
  for (int stage = 0; stage <= 3; ++stage) {
    for (DType precision : {DType::kF32, DType::kBF16, DType::kF16}) {
      const testing::RunSpec spec = spec_for(stage, precision);
      const Run counted = run_counted(model, spec);
      const testing::RunResult on_cpu = testing::run(comm::testing::world(), model, spec);
      INFO("stage " << stage << ", " << std::string(dtype_name(precision)) << ": " << describe(counted));
      std::printf("stage %d %s: %s\n", stage, dtype_name(precision), describe(counted).c_str());
      REQUIRE(counted.steps.size() == on_cpu.steps.size());
      for (size_t s = 0; s < counted.steps.size(); ++s) {
        CHECK(counted.steps[s].collectives == 0);
        CHECK(std::memcmp(&counted.steps[s].result.loss, &on_cpu.steps[s].loss, sizeof(double)) == 0);
        CHECK(std::memcmp(&counted.steps[s].result.grad_norm, &on_cpu.steps[s].grad_norm, sizeof(double)) ==
              0);
      }
      REQUIRE(counted.master.size() == on_cpu.master.size());
      CHECK(std::memcmp(counted.master.data(), on_cpu.master.data(), counted.master.size() * sizeof(float)) ==
            0);
    }
  }
}

// The host synchronizations a step must make at one rank, with k micro-batches (model/loop.cc,
// zero/engine.cc):
//   2k  the uploads of each micro-batch's inputs and targets: an upload returns once the host array may be
//       reused, and the CUDA backend's upload from pageable memory waits for its copy
//       (kernels/cuda/cuda_ops.cc);
//   k   each micro-batch's loss, which the layer loop returns as a number (ops.sum over the losses);
//   1   the overflow flag (all_finite over the gradient shard), for the loss scaler;
//   1   the squared gradient norm (sum_of_squares), for clipping and the step's result.
// Nothing else: no synchronization before a collective (there is none at one rank), and none in the
// optimizer, whose updates stay queued. A step's gradient-bucket and wire-buffer releases run the queued ops
// on the checked backend (release_waits); on the CUDA backend its wire memory is kept and a released block is
// retired with an event instead (tensor/kept_block_source.h), so they are not counted here.
int64_t required_synchronizations(int micro_batches) {
  return 3 * int64_t(micro_batches) + 2;
}

TEST_CASE("one data-parallel rank: a step synchronizes with the host only to read what it must") {
  REQUIRE(comm::testing::world().size() == 1);
  const GPTConfig model = testing::tiny_model();
  for (int stage = 0; stage <= 3; ++stage) {
    for (int accumulation : {1, 2, 3}) {
      testing::RunSpec spec = spec_for(stage, stage % 2 == 0 ? DType::kF32 : DType::kBF16);
      spec.accumulation = accumulation;
      const Run run = run_counted(model, spec);
      INFO("stage " << stage << ", " << accumulation << " micro-batches: " << describe(run));
      for (const StepRecord& step : run.steps) {
        CHECK_FALSE(step.result.skipped);
        CHECK(step.host_synchronizations == required_synchronizations(accumulation));
      }
    }
  }
}

}  // namespace
}  // namespace gpt
