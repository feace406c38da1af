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

TEST_CASE("the need: the planner's CPU count, kept blocks, the checkpoint copy and the baseline") {
  gpt::TrainOptions o = tiny();
  const gpt::MemoryNeed plain = gpt::rank_memory_need(o, 1, 2, 1e6);
  const gpt::PlanMemory plan = gpt::plan_memory(o.model, o.zero, 1, 2, 2, 1, gpt::MemoryTarget::kCpu);
  // Freed blocks kept for reuse stay within 5% above the peak of the arenas' blocks (all but the ring's
  // staging and the start-up copy, which live outside them).
  const double in_blocks = plan.total - plan.of("communication staging") - plan.of("start-up copy");
  CHECK(plain.of("kept host blocks") == doctest::Approx(0.05 * in_blocks));
  CHECK(plain.total == doctest::Approx(plan.total + 0.05 * in_blocks + 1e6));
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

namespace {

// A model whose blocks dominate (2 layers of hidden 1024, a 512-token vocabulary) on 8 ranks of one machine
// at stage 3: what stage 3 holds beside its shards (two gathered blocks, a block's gradient) does not shrink
// with more ranks, offload or checkpointing, only with smaller gather units.
gpt::TrainOptions block_heavy(int stage) {
  gpt::TrainOptions o;
  o.model.num_layers = 2;
  o.model.hidden = 1024;
  o.model.heads = 16;
  o.model.seq_len = 32;
  o.model.max_positions = 32;
  o.model.vocab = 500;
  o.micro_batch = 1;
  o.zero.stage = stage;
  o.zero.overlap_comm = true;
  o.zero.precision = gpt::DType::kF16;
  return o;
}

double need_of(gpt::TrainOptions o, int stage, int tile_factor, int machines = 1) {
  o.zero.stage = stage;
  o.zero.tile_factor = tile_factor;
  return gpt::rank_memory_need(o, machines, 8, 0).total;
}

// The guard's line for a machine of 8 ranks that may each use `budget`.
std::string guard_line(const gpt::TrainOptions& o, double budget) {
  const double need = gpt::rank_memory_need(o, 1, 8, 0).total;
  const std::vector<gpt::RankMemory> ranks(8, gpt::RankMemory{1, need, 100 * kGiB, 0});
  return gpt::judge_memory(o, ranks, 0, 1, 8, 8 * budget).problem;
}

}  // namespace

TEST_CASE("the guard names the smallest tile factor that fits when only tiling does") {
  const gpt::TrainOptions o = block_heavy(3);
  const double untiled = need_of(o, 3, 1), tiled2 = need_of(o, 3, 2), tiled4 = need_of(o, 3, 4);
  INFO("stage 3 needs " << untiled << " untiled, " << tiled2 << " at tile factor 2, " << tiled4 << " at 4");
  // A real case: tiling saves much, and nothing else comes close.
  REQUIRE(tiled4 < tiled2);
  REQUIRE(tiled2 < 0.75 * untiled);
  gpt::TrainOptions offloaded = o;
  offloaded.zero.offload.optimizer = offloaded.zero.offload.param = gpt::OffloadDevice::kNvme;
  offloaded.zero.recompute = gpt::Recompute::full();
  REQUIRE(gpt::rank_memory_need(offloaded, 1, 8, 0).total > tiled2);
  REQUIRE(need_of(o, 3, 1, 1 << 16) > tiled2);  // 2^16 machines of 8 ranks

  std::string line = guard_line(o, tiled2);
  CHECK(line.find("; would fit: --tile-factor 2 (") != std::string::npos);
  CHECK(line.find("ranks") == line.find("ranks on its machine"));  // no "more ranks" alternative
  // Between the needs at 4 and at 2: factor 4 is the smallest that fits.
  line = guard_line(o, (tiled2 + tiled4) / 2);
  CHECK(line.find("; would fit: --tile-factor 4 (") != std::string::npos);
  CHECK(line.find("--tile-factor 2") == std::string::npos);
  // At stage 2 the suggestion carries the stage with it.
  line = guard_line(block_heavy(2), tiled2);
  CHECK(line.find("--zero-stage 3 --tile-factor 2 (") != std::string::npos);
  // Already tiled at 2: the next factor up.
  gpt::TrainOptions tiled = o;
  tiled.zero.tile_factor = 2;
  line = guard_line(tiled, (tiled2 + tiled4) / 2);
  CHECK(line.find("; would fit: --tile-factor 4 (") != std::string::npos);
  // Nothing fits: the sentence names tiling among what was tried, and "all of them" includes it.
  line = guard_line(o, 0.01 * tiled4);
  CHECK(
      line.find("none of more ranks, a higher stage, NVMe offload, activation checkpointing or tiling would "
                "fit (all of them: ") != std::string::npos);
}

TEST_CASE("a model that tiles by no factor of 2, 4 or 8 gets no tiling suggestion") {
  gpt::TrainOptions o = block_heavy(3);
  o.model.hidden = 1000;  // not a multiple of 32
  o.model.heads = 8;
  const double need = gpt::rank_memory_need(o, 1, 8, 0).total;
  const std::string line = guard_line(o, 0.9 * need);
  CHECK(!line.empty());
  CHECK(line.find("--tile-factor") == std::string::npos);
}
