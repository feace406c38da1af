// The seam holds: a 4-rank (2 nodes x 2) ZeRO-3 run with all of ZeRO++ (qwZ, hpZ, qgZ), fp16, two micro-steps
// per step, activation checkpointing and dropout, on the checked backend (device memory inaccessible outside
// op calls) equals the CPU backend's bit for bit. Any read or write of model state, gradients or activations
// outside the seam would kill the run with SIGSEGV.
#include <doctest/doctest.h>

#include <cstring>

#include "tests/comm/mpi_test_env.h"
#include "tests/seam/checked_ops.h"
#include "tests/zero/engine_harness.h"

namespace gpt {
namespace {

TEST_CASE("a ZeRO++ stage-3 run on the checked backend equals the CPU backend bit for bit") {
  comm::Communicator& world = comm::testing::world();
  const GPTConfig model = testing::tiny_model();
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
  spec.zero.checkpoint_activations = true;
  spec.zero.hidden_dropout = 0.1;
  spec.zero.attention_dropout = 0.1;
  spec.steps = 3;
  const testing::RunResult on_cpu = testing::run(world, model, spec);
  testing::CheckedOps checked;
  spec.ops = &checked;
  const testing::RunResult on_checked = testing::run(world, model, spec);
  CHECK(checked.calls() > 0);
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

}  // namespace
}  // namespace gpt
