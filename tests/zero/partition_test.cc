// Partitioning pads every unit to a multiple of 8W and gives each rank an equal, 8-aligned shard; buckets
// hold whole units in backward order.
#include "zero/partition.h"

#include <doctest/doctest.h>

#include "zero/reduce.h"

TEST_CASE("units are padded to 8W and cut into equal aligned shards") {
  gpt::GPTConfig config;
  config.num_layers = 3;
  config.hidden = 48;
  config.heads = 4;
  config.max_positions = 20;
  config.seq_len = 20;
  config.vocab = 300;
  const gpt::ParamTable table = gpt::make_param_table(config);
  for (int W : {1, 2, 3, 4, 8}) {
    const gpt::Partition partition(table, W, W);
    int64_t padded = 0, shard_total = 0;
    for (size_t u = 0; u < table.units.size(); ++u) {
      const gpt::UnitPartition& p = partition.unit(int(u));
      CHECK(p.numel == table.units[u].numel);
      CHECK(p.padded % (8 * W) == 0);
      CHECK(p.padded >= p.numel);
      CHECK(p.padded - p.numel < 8 * W);
      CHECK(p.shard * W == p.padded);
      CHECK(p.shard % 8 == 0);
      CHECK(p.padded_offset == padded);
      CHECK(p.shard_offset == shard_total);
      padded += p.padded;
      shard_total += p.shard;
      // The owned ranges of all ranks tile the unit exactly.
      int64_t covered = 0;
      for (int r = 0; r < W; ++r) {
        const auto range = partition.owned_model_range(int(u), r);
        CHECK(range.begin == p.model_offset + std::min<int64_t>(r * p.shard, p.numel));
        covered += range.end - range.begin;
      }
      CHECK(covered == p.numel);
    }
    CHECK(partition.padded_total() == padded);
    CHECK(partition.shard_total() * W == padded);
  }
  const gpt::Partition stage0(table, 4, 1);
  CHECK(stage0.shard_total() == stage0.padded_total());
}

TEST_CASE("a bucket closes before a unit that would overflow it; a larger unit is its own bucket") {
  gpt::GPTConfig config;
  config.num_layers = 4;
  config.hidden = 16;
  config.heads = 2;
  config.max_positions = 8;
  config.seq_len = 8;
  config.vocab = 64;  // wte 128 x 16 = 2048, wpe 128, block 3280, ln_f 32
  const gpt::ParamTable table = gpt::make_param_table(config);
  const gpt::Partition partition(table, 2, 2);
  const std::vector<int> backward = {6, 5, 4, 3, 2, 1, 0};
  auto buckets = gpt::plan_buckets(partition, backward, 7000);
  // ln_f + h.3 + h.2 = 6592 <= 7000 (h.1 would make 9872); h.1 + h.0 + wpe = 6688 (wte would make 8736).
  CHECK(buckets == std::vector<std::vector<int>>{{6, 5, 4}, {3, 2, 1}, {0}});
  buckets = gpt::plan_buckets(partition, backward, 1000);
  CHECK(buckets == std::vector<std::vector<int>>{{6}, {5}, {4}, {3}, {2}, {1}, {0}});
  // In segments (an interleaved pipeline stage's chunks), no bucket spans two: ln_f + h.3 close at the
  // segment's end although h.2 would fit.
  buckets = gpt::plan_buckets(partition, std::vector<std::vector<int>>{{6, 5}, {4, 3, 2, 1, 0}}, 7000);
  CHECK(buckets == std::vector<std::vector<int>>{{6, 5}, {4, 3}, {2, 1, 0}});
}
