// The loaders (issue 3, item 4): how windows are cut, each epoch a permutation of all windows, seeds that
// matter, global batches independent of world size and accumulation split, and resuming from a saved
// stream offset.
#include "data/loader.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "data/shard.h"
#include "tests/data/test_files.h"

namespace {

using gpt::data::LoaderConfig;
using gpt::data::TrainLoader;
using gpt::data::testing::scratch_dir;

constexpr int kVocab = 50257;
constexpr int kSeq = 16;

// Shards whose token at (shard s, index i) is s * 10000 + i, so every window's origin can be read off.
std::vector<std::string> make_shards(const std::vector<int>& lengths) {
  std::vector<std::string> paths;
  for (size_t s = 0; s < lengths.size(); ++s) {
    std::vector<uint16_t> tokens(lengths[s]);
    for (int i = 0; i < lengths[s]; ++i) tokens[i] = static_cast<uint16_t>(s * 10000 + i);
    paths.push_back(scratch_dir() + "/loader_" + std::to_string(s) + ".bin");
    gpt::data::write_shard(paths.back(), tokens);
  }
  return paths;
}

// 301 + 400 + 17 + 5 tokens: 18 + 24 + 1 + 0 windows of 16 + 1 tokens.
const std::vector<std::string>& shards() {
  static const std::vector<std::string> paths = make_shards({301, 400, 17, 5});
  return paths;
}

LoaderConfig config(int micro, int accumulation, int world, int rank, uint64_t seed = 7) {
  return LoaderConfig{kSeq, micro, accumulation, world, rank, seed};
}

// Everything a global batch delivers, in rank-major order within each micro-step.
struct Batch {
  std::vector<int32_t> inputs, targets;
  std::vector<int64_t> positions;
  bool operator==(const Batch&) const = default;
};

// Global batch `step` as a run of `world` ranks with `accumulation` micro-steps sees it, put back into
// stream order: micro-step m of rank r holds positions [(m * world + r) * micro, ... + micro).
Batch global_batch(int micro, int accumulation, int world, int64_t step, uint64_t seed = 7) {
  Batch batch;
  const int rows = micro * accumulation * world;
  batch.inputs.resize(rows * kSeq);
  batch.targets.resize(rows * kSeq);
  batch.positions.resize(rows);
  for (int r = 0; r < world; ++r) {
    TrainLoader loader(shards(), kVocab, config(micro, accumulation, world, r, seed));
    for (int m = 0; m < accumulation; ++m) {
      const int row = (m * world + r) * micro;
      loader.load(step, m, &batch.inputs[row * kSeq], &batch.targets[row * kSeq], &batch.positions[row]);
    }
  }
  return batch;
}

}  // namespace

TEST_CASE("windows are seq+1 tokens at multiples of seq within a shard, never across shards") {
  TrainLoader loader(shards(), kVocab, config(1, 1, 1, 0));
  REQUIRE(loader.num_windows() == 18 + 24 + 1);
  std::set<int32_t> first_tokens;
  std::vector<int32_t> inputs(kSeq), targets(kSeq);
  int64_t position = 0;
  for (int64_t p = 0; p < loader.num_windows(); ++p) {
    loader.load_positions(p, 1, inputs.data(), targets.data(), &position);
    CHECK(position == p);
    const int32_t first = inputs[0];
    CHECK(first % 10000 % kSeq == 0);
    for (int t = 0; t < kSeq; ++t) {
      CHECK(inputs[t] == first + t);       // contiguous within one shard
      CHECK(targets[t] == first + t + 1);  // targets are inputs shifted by one
    }
    first_tokens.insert(first);
  }
  CHECK(first_tokens.size() == 43);
  CHECK(first_tokens.count(0) == 1);
  CHECK(first_tokens.count(17 * kSeq) == 1);  // shard 0's last window ends at token 288 <= 300
  CHECK(first_tokens.count(20000) == 1);      // shard 2's only window: tokens 0..16
  CHECK(first_tokens.count(30000) == 0);      // shard 3 is too short for a window
}

TEST_CASE("every block of N stream positions from a multiple of N is a permutation of all windows") {
  TrainLoader loader(shards(), kVocab, config(1, 1, 1, 0));
  const int64_t n = loader.num_windows();
  std::vector<std::vector<int64_t>> epochs;
  for (int64_t epoch = 0; epoch < 4; ++epoch) {
    std::vector<int64_t> windows;
    for (int64_t i = 0; i < n; ++i) windows.push_back(loader.window_at(epoch * n + i));
    std::vector<int64_t> sorted = windows;
    std::sort(sorted.begin(), sorted.end());
    for (int64_t i = 0; i < n; ++i) CHECK(sorted[i] == i);
    epochs.push_back(windows);
  }
  CHECK(epochs[0] != epochs[1]);  // a new permutation per epoch
  CHECK(epochs[1] != epochs[2]);
}

TEST_CASE("different seeds give different orders; the same seed the same order") {
  TrainLoader a(shards(), kVocab, config(1, 1, 1, 0, 1)), b(shards(), kVocab, config(1, 1, 1, 0, 2)),
      c(shards(), kVocab, config(1, 1, 1, 0, 1));
  std::vector<int64_t> order_a, order_b, order_c;
  for (int64_t p = 0; p < a.num_windows(); ++p) {
    order_a.push_back(a.window_at(p));
    order_b.push_back(b.window_at(p));
    order_c.push_back(c.window_at(p));
  }
  CHECK(order_a != order_b);
  CHECK(order_a == order_c);
}

TEST_CASE("the permutation is our own algorithm, pinned so every platform draws the same order") {
  // Fisher-Yates over splitmix64 (loader.cc), values recorded from it: a regression pin, since a change
  // here would silently change every run's data order.
  CHECK(gpt::data::seeded_permutation(10, 1234, 0) == std::vector<int64_t>{9, 5, 7, 0, 1, 6, 2, 3, 8, 4});
  CHECK(gpt::data::seeded_permutation(10, 1234, 1) == std::vector<int64_t>{8, 1, 3, 4, 6, 5, 2, 0, 7, 9});
  CHECK(gpt::data::seeded_permutation(1, 99, 5) == std::vector<int64_t>{0});
  CHECK(gpt::data::seeded_permutation(0, 99, 5).empty());
}

TEST_CASE("a 4-rank run's global batches equal a 1-rank run's with 4 accumulation steps") {
  for (int64_t step = 0; step < 40; ++step) {  // 40 x 12 positions: several epochs of 43 windows
    const Batch single = global_batch(3, 4, 1, step);
    CHECK(global_batch(3, 1, 4, step) == single);
    CHECK(global_batch(3, 2, 2, step) == single);
    CHECK(global_batch(1, 3, 4, step) == single);  // another split of the same G = 12
    for (int i = 0; i < 12; ++i) CHECK(single.positions[i] == step * 12 + i);
  }
}

TEST_CASE("resuming from the saved stream offset reproduces the next 100 global batches") {
  const int64_t saved_at = 37;
  std::vector<Batch> uninterrupted;
  for (int64_t step = 0; step < saved_at + 100; ++step) uninterrupted.push_back(global_batch(2, 2, 2, step));

  TrainLoader before(shards(), kVocab, config(2, 2, 2, 0));
  const int64_t offset = before.stream_offset(saved_at);  // what a checkpoint stores
  CHECK(offset == saved_at * 8);
  // Resume on one rank with 8 micro-steps (same G = 8), from the offset alone.
  TrainLoader after(shards(), kVocab, config(1, 8, 1, 0));
  REQUIRE(after.global_batch() == 8);
  const int64_t resume_step = offset / after.global_batch();
  for (int64_t k = 0; k < 100; ++k) {
    Batch batch;
    batch.inputs.resize(8 * kSeq);
    batch.targets.resize(8 * kSeq);
    batch.positions.resize(8);
    for (int m = 0; m < 8; ++m) {
      after.load(resume_step + k, m, &batch.inputs[m * kSeq], &batch.targets[m * kSeq], &batch.positions[m]);
    }
    CHECK(batch == uninterrupted[saved_at + k]);
  }
}

TEST_CASE("the validation loader reads windows in order") {
  gpt::data::ValidLoader valid({shards()[1]}, kVocab, kSeq);
  REQUIRE(valid.num_windows() == 24);
  REQUIRE(valid.num_batches(5) == 4);
  std::vector<int32_t> inputs(5 * kSeq), targets(5 * kSeq);
  valid.load(2, 5, inputs.data(), targets.data());
  for (int row = 0; row < 5; ++row) {
    CHECK(inputs[row * kSeq] == 10000 + (10 + row) * kSeq);
    CHECK(targets[row * kSeq + kSeq - 1] == 10000 + (11 + row) * kSeq);
  }
  CHECK_THROWS_AS(valid.load(4, 5, inputs.data(), targets.data()), std::out_of_range);
}

TEST_CASE("too little data is a DataError naming the shard and the fix; bad configs are rejected") {
  const std::vector<std::string> tiny = {shards()[3]};
  CHECK_THROWS_WITH_AS(TrainLoader(tiny, kVocab, config(1, 1, 1, 0)),
                       gpt::data::testing::contains(tiny[0] + ": the longest shard holds 5 tokens"),
                       gpt::data::DataError);
  CHECK_THROWS_WITH_AS(gpt::data::ValidLoader(tiny, kVocab, kSeq),
                       gpt::data::testing::contains("--seq-length"), gpt::data::DataError);
  CHECK_THROWS_AS(TrainLoader(shards(), kVocab, config(1, 1, 2, 2)), std::invalid_argument);
  CHECK_THROWS_AS(TrainLoader(shards(), kVocab, config(0, 1, 1, 0)), std::invalid_argument);
  CHECK_THROWS_AS(TrainLoader(shards(), 20000, config(1, 1, 1, 0)), gpt::data::DataError);  // ids >= vocab
}
