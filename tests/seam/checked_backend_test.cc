// The seam holds: a 4-rank (2 nodes x 2) ZeRO-3 run with all of ZeRO++ (qwZ, hpZ, qgZ), fp16, two micro-steps
// per step, activation checkpointing and dropout, on the checked backend (device memory inaccessible outside
// op calls) equals the CPU backend's bit for bit. Any read or write of model state, gradients or activations
// outside the seam would kill the run with SIGSEGV. The asynchronous checked backend queues its ops until the
// engine synchronizes, as a GPU stream may: the same runs must still be equal.
#include <doctest/doctest.h>

#include <cstring>

#include "tests/comm/mpi_test_env.h"
#include "tests/seam/checked_ops.h"
#include "tests/zero/engine_harness.h"

namespace gpt {
namespace {

// The run every case makes: ZeRO-3 with all of ZeRO++, or the variant a case asks for.
testing::RunSpec zeropp_spec(const comm::Communicator& world) {
  testing::RunSpec spec;
  spec.zero.stage = 3;
  spec.zero.precision = DType::kF16;
  spec.zero.quantized_weights = true;
  spec.zero.quantized_gradients = true;
  spec.zero.hpz_partition_size = world.topology().ranks_per_node;
  spec.zero.weight_block = 64;
  spec.zero.gradient_block = 64;
  spec.zero.overlap_comm = true;
  spec.zero.reduce_bucket_size = 20000;
  spec.zero.recompute = Recompute::full();
  spec.zero.hidden_dropout = 0.1;
  spec.zero.attention_dropout = 0.1;
  spec.steps = 3;
  return spec;
}

void check_same_run(const testing::RunResult& on_cpu, const testing::RunResult& on_checked) {
  REQUIRE(on_cpu.steps.size() == on_checked.steps.size());
  for (size_t s = 0; s < on_cpu.steps.size(); ++s) {
    CHECK_FALSE(on_cpu.steps[s].skipped);
    CHECK(std::memcmp(&on_cpu.steps[s].loss, &on_checked.steps[s].loss, sizeof(double)) == 0);
    CHECK(std::memcmp(&on_cpu.steps[s].grad_norm, &on_checked.steps[s].grad_norm, sizeof(double)) == 0);
  }
  REQUIRE(on_cpu.master.size() == on_checked.master.size());
  CHECK(std::memcmp(on_cpu.master.data(), on_checked.master.data(), on_cpu.master.size() * sizeof(float)) ==
        0);
}

// The CPU backend's run and the checked backend's, synchronous or asynchronous.
void compare_backends(testing::RunSpec spec, bool asynchronous) {
  comm::Communicator& world = comm::testing::world();
  const GPTConfig model = testing::tiny_model();
  const testing::RunResult on_cpu = testing::run(world, model, spec);
  testing::CheckedOps checked(asynchronous);
  spec.ops = &checked;
  const testing::RunResult on_checked = testing::run(world, model, spec);
  CHECK(checked.calls() > 0);
  check_same_run(on_cpu, on_checked);
}

TEST_CASE("a ZeRO++ stage-3 run on the checked backend equals the CPU backend bit for bit") {
  compare_backends(zeropp_spec(comm::testing::world()), false);
}

// What a GPU's stream does to the engine: ops run late, at the next synchronization. Every buffer the engine
// hands to the communicator must be complete first, and no buffer a queued op reads may be overwritten.
TEST_CASE("asynchronous ops (queued until a synchronization) leave every ZeRO configuration bit for bit") {
  const comm::Communicator& world = comm::testing::world();
  SUBCASE("ZeRO-3 with qwZ, hpZ, qgZ (and LoCo), fp16, activation checkpointing and dropout") {
    testing::RunSpec spec = zeropp_spec(world);
    spec.zero.loco = true;
    compare_backends(spec, true);
  }
  SUBCASE("ZeRO-3, fp16, without ZeRO++") {
    testing::RunSpec spec = zeropp_spec(world);
    spec.zero.quantized_weights = spec.zero.quantized_gradients = false;
    spec.zero.hpz_partition_size = 1;
    compare_backends(spec, true);
  }
  SUBCASE("stages 0, 1 and 2, fp32 and bf16") {
    for (int stage : {0, 1, 2}) {
      testing::RunSpec spec = zeropp_spec(world);
      spec.zero.stage = stage;
      spec.zero.precision = stage == 1 ? DType::kBF16 : DType::kF32;
      spec.zero.quantized_weights = spec.zero.quantized_gradients = false;
      spec.zero.hpz_partition_size = 1;
      compare_backends(spec, true);
    }
  }
}

}  // namespace
}  // namespace gpt
