// The memory guard's verdict (train/memory_guard.h) from every rank's numbers: the memory of a machine is
// divided among the ranks that share its boot id, the worst rank is named in the same line on every rank,
// and the need is the planner's CPU count plus the checkpoint copy and the measured baseline.
#include "train/memory_guard.h"

#include <doctest/doctest.h>

namespace {

gpt::TrainOptions tiny() {
  gpt::TrainOptions o;
  o.model.num_layers = 2;
  o.model.hidden = 64;
  o.model.heads = 2;
  o.model.seq_len = 32;
  o.model.max_positions = 32;
  o.model.vocab = 500;
  o.micro_batch = 2;
  o.zero.stage = 3;
  o.zero.precision = gpt::DType::kF16;
  return o;
}

constexpr double kGiB = 1024.0 * 1024 * 1024;

}  // namespace

TEST_CASE("a machine's memory is shared by the ranks with its boot id") {
  const gpt::TrainOptions o = tiny();
  std::vector<gpt::RankMemory> ranks = {{1, 1 * kGiB, 10 * kGiB, 0.5 * kGiB},
                                        {1, 1 * kGiB, 11 * kGiB, 0.5 * kGiB},
                                        {2, 1 * kGiB, 30 * kGiB, 0.5 * kGiB},
                                        {2, 1 * kGiB, 31 * kGiB, 0.5 * kGiB}};
  gpt::MemoryVerdict v = gpt::judge_memory(o, ranks, 0, 2, 2, 0);
  CHECK(v.problem.empty());
  CHECK(v.ranks_on_machine == 2);
  // What is free now (the smallest reading) plus what the machine's ranks hold already, halved.
  CHECK(v.machine_memory == 11 * kGiB);
  CHECK(v.budget == 5.5 * kGiB);
  CHECK(gpt::judge_memory(o, ranks, 3, 2, 2, 0).budget == 15.5 * kGiB);
  // --memory-limit is the machine's: each of its 2 ranks gets half.
  CHECK(gpt::judge_memory(o, ranks, 2, 2, 2, 8 * kGiB).budget == 4 * kGiB);

  // Rank 1 needs more than its share: every rank reaches the same line, naming rank 1.
  ranks[1].need = 6 * kGiB;
  const std::string line = gpt::judge_memory(o, ranks, 0, 2, 2, 0).problem;
  CHECK(line == gpt::judge_memory(o, ranks, 3, 2, 2, 0).problem);
  CHECK(line.find("memory: rank 1 needs 6.0 GiB") == 0);
  CHECK(line.find("but may use 5.5 GiB (MemAvailable 11.0 GiB shared by 2 ranks on its machine)") !=
        std::string::npos);
  CHECK(line.find("--plan") != std::string::npos);
}

TEST_CASE("the need: the planner's CPU count, the checkpoint copy and the baseline") {
  gpt::TrainOptions o = tiny();
  const gpt::MemoryNeed plain = gpt::rank_memory_need(o, 1, 2, 1e6);
  const gpt::PlanMemory plan = gpt::plan_memory(o.model, o.zero, 1, 2, 2, 1, gpt::MemoryTarget::kCpu);
  CHECK(plain.total == doctest::Approx(plan.total + 1e6));
  CHECK(plain.of("process baseline") == 1e6);
  CHECK(plain.of("checkpoint copy") == 0);
  o.save = "/tmp/somewhere";
  const gpt::MemoryNeed saving = gpt::rank_memory_need(o, 1, 2, 1e6);
  CHECK(saving.of("checkpoint copy") == 12.0 * (plan.of("master") / 4));
  // Optimizer and weights on NVMe leave the swap buffers in memory instead of the state.
  o.zero.offload.optimizer = o.zero.offload.param = gpt::OffloadDevice::kNvme;
  const gpt::MemoryNeed offloaded = gpt::rank_memory_need(o, 1, 2, 1e6);
  CHECK(offloaded.of("master") == 0);
  CHECK(offloaded.of("swap buffers") > 0);
}
