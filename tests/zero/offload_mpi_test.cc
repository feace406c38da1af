// ZeRO-Infinity under MPI (run at 1 and 4 ranks): training with the optimizer state and the compute weights
// on NVMe (swap files in the test's temporary folder, many small sub-groups) equals in-memory training bit
// for bit, every step's loss and the final master weights, and leaves no swap folder behind.
#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include "kernels/cpu/threads.h"
#include "tests/comm/mpi_test_env.h"
#include "tests/zero/engine_harness.h"

namespace {

using gpt::DType;
using gpt::OffloadDevice;
using gpt::testing::RunResult;
using gpt::testing::RunSpec;

gpt::comm::Communicator& world() {
  return gpt::comm::testing::world();
}

std::string swap_root() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/offload_swap";
}

RunSpec base_spec(DType precision) {
  RunSpec spec;
  spec.zero.stage = 3;
  spec.zero.precision = precision;
  spec.zero.hidden_dropout = spec.zero.attention_dropout = 0.1;
  spec.zero.reduce_bucket_size = 5000;
  spec.zero.overlap_comm = true;
  spec.zero.adam.weight_decay = 0.01;
  spec.zero.gradient_clipping = 1.0;
  spec.steps = 6;
  return spec;
}

// The same run with some state on NVMe: sub-groups of 2048 elements, so every unit is cut and every walk
// crosses several buffers.
RunSpec offloaded(RunSpec spec, bool optimizer, bool param, int buffers) {
  gpt::OffloadConfig& f = spec.zero.offload;
  std::filesystem::create_directories(swap_root());
  if (optimizer) f.optimizer = OffloadDevice::kNvme, f.optimizer_nvme_path = swap_root();
  if (param) f.param = OffloadDevice::kNvme, f.param_nvme_path = swap_root();
  f.optimizer_buffer_count = buffers;
  f.sub_group_size = 2048;
  f.run_id = "offload_mpi_test";
  f.aio.block_size = 8192;  // several chunks per request
  return spec;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void check_identical(const RunResult& offloaded, const RunResult& reference, const std::string& what) {
  INFO(what);
  REQUIRE(offloaded.steps.size() == reference.steps.size());
  for (size_t s = 0; s < reference.steps.size(); ++s) {
    INFO("step " << s + 1);
    CHECK(offloaded.steps[s].loss == reference.steps[s].loss);
    CHECK(offloaded.steps[s].grad_norm == reference.steps[s].grad_norm);
    CHECK(offloaded.steps[s].skipped == reference.steps[s].skipped);
  }
  CHECK(same_bits(offloaded.master, reference.master));
  // A clean exit removes every rank's folder and the run's.
  world().barrier().wait();
  CHECK(!std::filesystem::exists(swap_root() + "/offload_mpi_test"));
  world().barrier().wait();  // before a faster rank starts the next run's folders
}

struct OneThread {
  OneThread() { gpt::cpu::set_num_threads(1); }
} one_thread;

}  // namespace

TEST_CASE("fp32: the optimizer on NVMe equals the optimizer in memory bit for bit") {
  const gpt::GPTConfig model = gpt::testing::tiny_model();
  const RunSpec spec = base_spec(DType::kF32);
  const RunResult reference = gpt::testing::run(world(), model, spec);
  for (int buffers : {1, 2, 4}) {
    check_identical(gpt::testing::run(world(), model, offloaded(spec, true, false, buffers)), reference,
                    "offload_optimizer nvme, buffer_count " + std::to_string(buffers));
  }
}

TEST_CASE("fp16: the compute weights on NVMe, and both tiers, equal in-memory training bit for bit") {
  const gpt::GPTConfig model = gpt::testing::tiny_model();
  const RunSpec spec = base_spec(DType::kF16);
  const RunResult reference = gpt::testing::run(world(), model, spec);
  check_identical(gpt::testing::run(world(), model, offloaded(spec, false, true, 4)), reference,
                  "offload_param nvme");
  check_identical(gpt::testing::run(world(), model, offloaded(spec, true, true, 3)), reference,
                  "offload_optimizer and offload_param nvme");
}

TEST_CASE("ZeRO++ (qwZ, hpZ) with both tiers on NVMe equals ZeRO++ in memory bit for bit") {
  if (world().size() < 2) return;  // hpZ needs a node of two or more ranks
  const gpt::GPTConfig model = gpt::testing::tiny_model();
  RunSpec spec = base_spec(DType::kF16);
  spec.zero.quantized_weights = true;
  spec.zero.hpz_partition_size = world().topology().ranks_per_node;
  const RunResult reference = gpt::testing::run(world(), model, spec);
  check_identical(gpt::testing::run(world(), model, offloaded(spec, true, true, 4)), reference,
                  "qwZ + hpZ with offload");
}
