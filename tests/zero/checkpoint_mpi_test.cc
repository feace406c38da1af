// Checkpoints under MPI (4 ranks as 2 x 2): a checkpoint saved at 4 ranks loads at 2 and at 1 rank with
// bit-identical fp32 master weights; Adam's state and the step survive; altered or truncated shards are
// refused on every rank with the file's name and the checksum mismatch. A checkpoint saved with
// memory-centric tiling loads without it and the other way round (units differ; the flat layout does not).
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>

#include "kernels/cpu/threads.h"
#include "tests/comm/mpi_test_env.h"
#include "tests/zero/engine_harness.h"
#include "zero/checkpoint.h"

namespace {

gpt::comm::Communicator& world() {
  return gpt::comm::testing::world();
}

struct OneThread {
  OneThread() { gpt::cpu::set_num_threads(1); }
} one_thread;

std::string scratch_dir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return std::string(tmp ? tmp : "/tmp") + "/" + name;
}

gpt::ZeroConfig config(int stage) {
  gpt::ZeroConfig z;
  z.stage = stage;
  z.precision = gpt::DType::kF16;
  z.reduce_bucket_size = 5000;
  return z;
}

}  // namespace

TEST_CASE("a checkpoint saved at W ranks loads at 2 and 1 ranks with bit-identical master weights") {
  const gpt::GPTConfig model = gpt::testing::tiny_model();
  const std::string dir = scratch_dir("repartition");
  if (world().rank() == 0) std::filesystem::remove_all(dir);
  world().barrier().wait();
  // Train 3 steps at stage 3 on every rank and save.
  gpt::testing::RunSpec spec;
  spec.zero = config(3);
  spec.steps = 3;
  std::vector<float> saved_master;
  int64_t saved_steps = 0;
  {
    gpt::ZeroEngine engine(model, spec.zero, spec.micro_batch, world(), spec.seed);
    gpt::testing::train_steps(engine, world(), model, spec);
    gpt::TrainingPosition position{3, 0, int64_t(spec.micro_batch) * spec.accumulation * world().size(),
                                   spec.seed};
    gpt::save_checkpoint(engine, world(), dir, position, 0);
    saved_master = engine.gather_master();
    saved_steps = engine.applied_steps();
  }
  CHECK(std::filesystem::exists(dir + "/latest"));
  // Load into groups of 2 ranks and of 1 rank, at other stages too.
  for (int size : {2, 1}) {
    for (int stage : {0, 3}) {
      std::vector<int> members;
      for (int r = 0; r < size; ++r) members.push_back(r);
      std::unique_ptr<gpt::comm::Communicator> group = world().subgroup(members);
      if (group) {
        gpt::ZeroEngine engine(model, config(stage), spec.micro_batch, *group, 999);  // another init seed
        const gpt::LoadedCheckpoint loaded = gpt::load_checkpoint(engine, *group, dir, false);
        CHECK(loaded.position.iteration == 3);
        CHECK(loaded.saved_world_size == world().size());
        CHECK(engine.applied_steps() == saved_steps);
        const std::vector<float> master = engine.gather_master();
        CHECK(master == saved_master);
      }
      world().barrier().wait();
    }
  }
}

TEST_CASE("a checkpoint saved at one tile factor loads at another with bit-identical master weights") {
  gpt::GPTConfig model = gpt::testing::tiny_model();
  model.hidden = 64;  // tile factors 1 and 2 (tiles of 32 rows or more)
  for (const std::pair<int, int>& factors : {std::pair{2, 1}, std::pair{1, 2}}) {
    const int save_tiles = factors.first, load_tiles = factors.second;
    INFO("saved at tile factor " << save_tiles << ", loaded at " << load_tiles);
    const std::string dir = scratch_dir("retile" + std::to_string(save_tiles));
    if (world().rank() == 0) std::filesystem::remove_all(dir);
    world().barrier().wait();
    gpt::testing::RunSpec spec;
    spec.zero = config(3);
    spec.zero.tile_factor = save_tiles;
    spec.steps = 2;
    std::vector<float> saved_master;
    {
      gpt::ZeroEngine engine(model, spec.zero, spec.micro_batch, world(), spec.seed);
      gpt::testing::train_steps(engine, world(), model, spec);
      gpt::TrainingPosition position{2, 0, int64_t(spec.micro_batch) * spec.accumulation * world().size(),
                                     spec.seed};
      gpt::save_checkpoint(engine, world(), dir, position, 0);
      saved_master = engine.gather_master();
    }
    for (int size : {world().size(), 1}) {
      std::vector<int> members;
      for (int r = 0; r < size; ++r) members.push_back(r);
      std::unique_ptr<gpt::comm::Communicator> group = world().subgroup(members);
      if (group) {
        gpt::ZeroConfig z = config(3);
        z.tile_factor = load_tiles;
        gpt::ZeroEngine engine(model, z, spec.micro_batch, *group, 999);
        gpt::load_checkpoint(engine, *group, dir, false);
        CHECK(engine.gather_master() == saved_master);
      }
      world().barrier().wait();
    }
  }
}

TEST_CASE("an altered or truncated shard is refused on every rank, naming the file") {
  const gpt::GPTConfig model = gpt::testing::tiny_model();
  const std::string dir = scratch_dir("corrupt");
  gpt::ZeroEngine engine(model, config(3), 2, world(), 7);
  if (world().rank() == 0) std::filesystem::remove_all(dir);
  world().barrier().wait();
  const std::string path = gpt::save_checkpoint(engine, world(), dir, {1, 0, 8, 7}, 0);
  const std::string shard = path + "/shard_00001_of_" + (world().size() < 10 ? "0000" : "000") +
                            std::to_string(world().size()) + ".bin";
  for (const char* damage : {"altered", "truncated"}) {
    world().barrier().wait();
    if (world().rank() == 0) {
      if (std::string(damage) == "altered") {
        std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(100);
        f.put('\x7f');
      } else {
        std::filesystem::resize_file(shard, std::filesystem::file_size(shard) - 16);
      }
    }
    world().barrier().wait();
    std::string message;
    try {
      gpt::load_checkpoint(engine, world(), dir, false);
    } catch (const gpt::CheckpointError& e) {
      message = e.what();
    }
    INFO(damage << ": " << message);
    CHECK(message.find(shard) != std::string::npos);
    CHECK(message.find("checksum mismatch") != std::string::npos);
  }
}
