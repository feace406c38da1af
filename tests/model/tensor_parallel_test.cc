// Tensor parallelism at the model level: t threads, each a rank of a tensor-parallel group with its slice of
// the weights (make_param_table's TensorSlice), run the one layer loop together through an in-process
// TensorGroup; their loss equals the whole model's and their gradients, mapped back through for_each_run,
// equal the whole model's (within fp32 rounding: the sums run in another order), with and without sequence
// parallelism, hidden and attention dropout on, with every recomputation. The replicated parameters'
// gradients agree on every rank.
#include <doctest/doctest.h>

#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/flash_cpu_ops.h"
#include "model/loop.h"
#include "model/model.h"
#include "model/tensor_parallel.h"
#include "tests/model/flat_model.h"

namespace {

using gpt::Recompute;
using gpt::Tensor;
using gpt::TensorTraffic;

// The group's shared state: every member publishes its tensor's address, then reads the others'.
struct SharedGroup {
  explicit SharedGroup(int size) : size(size), barrier(size), data(size) {}
  int size;
  std::barrier<> barrier;
  std::vector<const float*> data;
};

// One rank of the in-process group (fp32 tensors): sums in rank order, in double.
class ThreadMember final : public gpt::TensorGroup {
 public:
  ThreadMember(SharedGroup& group, int rank) : group_(group), rank_(rank) {}
  int size() const override { return group_.size; }
  int rank() const override { return rank_; }
  void all_reduce(const Tensor& x, TensorTraffic) override {
    const int64_t n = x.numel();
    std::vector<float> sum = summed(x, 0, n);
    std::memcpy(x.data, sum.data(), n * sizeof(float));
    group_.barrier.arrive_and_wait();
  }
  void all_gather(const Tensor& out, const Tensor& x, TensorTraffic) override {
    const int64_t n = x.numel();
    publish(x);
    for (int r = 0; r < group_.size; ++r)
      std::memcpy(out.as<float>() + r * n, group_.data[r], n * sizeof(float));
    group_.barrier.arrive_and_wait();
  }
  void reduce_scatter(const Tensor& out, const Tensor& x, TensorTraffic) override {
    const int64_t n = out.numel();
    std::vector<float> sum = summed(x, rank_ * n, n);
    std::memcpy(out.data, sum.data(), n * sizeof(float));
    group_.barrier.arrive_and_wait();
  }

 private:
  void publish(const Tensor& x) {
    group_.data[rank_] = x.as<const float>();
    group_.barrier.arrive_and_wait();
  }
  // Elements [first, first + n) of the members' x summed; every member has read when it returns.
  std::vector<float> summed(const Tensor& x, int64_t first, int64_t n) {
    publish(x);
    std::vector<float> out(n);
    for (int64_t i = 0; i < n; ++i) {
      double s = 0;
      for (int r = 0; r < group_.size; ++r) s += group_.data[r][first + i];
      out[i] = float(s);
    }
    group_.barrier.arrive_and_wait();
    return out;
  }
  SharedGroup& group_;
  int rank_;
};

constexpr int kB = 2;

struct Run {
  float loss = 0;
  std::vector<float> grads;  // this rank's slice
  gpt::ParamTable table;
  size_t activation_bytes = 0;
};

// Two accumulated micro-steps with dropout on, on rank `slice.rank` of the group (size 1: no group).
Run run_rank(const std::vector<float>& whole, const gpt::ParamTable& whole_table, gpt::TensorSlice slice,
             gpt::TensorGroup* group, bool sequence_parallel, const Recompute& recompute,
             bool distribute_saved_activations = false, int layers = 2, gpt::Ops& ops = gpt::cpu_ops()) {
  const gpt::GPTConfig config = gpt::test::small_parallel_model(layers);
  Run r;
  r.table = gpt::make_param_table(config, 1, slice);
  gpt::Arena arena;
  gpt::LayerLoop<float> loop(config, kB, recompute, ops, arena, 1,
                             gpt::TensorParallel{group, sequence_parallel, distribute_saved_activations});
  // The loop's own count of its activations is what the arena holds in that category, but for each
  // allocation's rounding up to the arena's alignment.
  for (const auto& usage : arena.usage_by_category()) {
    if (usage.category != "activations") continue;
    CHECK(usage.current_bytes >= loop.activation_bytes());
    CHECK(usage.current_bytes - loop.activation_bytes() < gpt::Arena::kAlignment * usage.blocks);
  }
  gpt::test::FlatSlices slices(r.table, gpt::test::slice_weights(whole, whole_table, r.table));
  for (int step = 0; step < 2; ++step) {
    const int n = kB * config.seq_len;
    const std::vector<int32_t> x = gpt::test::lcg_tokens(n, config.vocab, 30 + step),
                               y = gpt::test::lcg_tokens(n, config.vocab, 40 + step);
    const int64_t windows[kB] = {5 + 2 * step, 6 + 2 * step};
    r.loss += loop.forward(slices, x.data(), y.data(), gpt::Dropout{0.1, 0.1, 77, windows}, true);
    loop.backward(slices, slices, 0.5f);
  }
  r.grads = slices.grads;
  r.activation_bytes = loop.activation_bytes();
  return r;
}

// ||a - b|| / ||b||.
double relative_error(const std::vector<double>& a, const std::vector<double>& b) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += (a[i] - b[i]) * (a[i] - b[i]);
    norm += b[i] * b[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-300));
}

// The whole model's initial weights, in the whole table's layout.
std::vector<float> initial_weights(int layers = 2) {
  const gpt::GPTConfig config = gpt::test::small_parallel_model(layers);
  gpt::GPT2<float> init(config, kB);
  init.init(9);
  return init.params;
}

// Every rank of a group of t threads.
std::vector<Run> run_group(int t, bool sequence_parallel, const Recompute& recompute,
                           bool distribute_saved_activations = false, int layers = 2,
                           gpt::Ops& ops = gpt::cpu_ops()) {
  const std::vector<float> weights = initial_weights(layers);
  const gpt::GPTConfig config = gpt::test::small_parallel_model(layers);
  const gpt::ParamTable whole_table = gpt::make_param_table(config);
  SharedGroup shared(t);
  std::vector<ThreadMember> members;
  for (int r = 0; r < t; ++r) members.emplace_back(shared, r);
  std::vector<Run> runs(t);
  std::vector<std::thread> threads;
  for (int r = 0; r < t; ++r) {
    threads.emplace_back([&, r] {
      runs[r] = run_rank(weights, whole_table, {t, r}, &members[r], sequence_parallel, recompute,
                         distribute_saved_activations, layers, ops);
    });
  }
  for (auto& thread : threads) thread.join();
  return runs;
}

void check_against_whole(int t, bool sequence_parallel, const Recompute& recompute) {
  const gpt::ParamTable whole_table = gpt::make_param_table(gpt::test::small_parallel_model());
  const Run whole = run_rank(initial_weights(), whole_table, {}, nullptr, false, Recompute{});
  const std::vector<Run> runs = run_group(t, sequence_parallel, recompute);

  for (int r = 0; r < t; ++r) CHECK(std::abs(runs[r].loss - whole.loss) <= 1e-5 * std::abs(whole.loss));
  // Each parameter's gradient, reassembled from the slices (replicated ones from every rank in turn).
  for (size_t p = 0; p < whole_table.params.size(); ++p) {
    const gpt::ParamInfo& info = whole_table.params[p];
    CAPTURE(info.name);
    std::vector<double> expected(whole.grads.begin() + info.offset,
                                 whole.grads.begin() + info.offset + info.numel);
    const bool replicated = runs[0].table.params[p].split == gpt::TensorSplit::kReplicated;
    for (int check = 0; check < (replicated ? t : 1); ++check) {
      std::vector<double> got(info.numel, 0.0);
      for (int r = 0; r < t; ++r) {
        if (replicated && r != check) continue;
        const gpt::ParamInfo& local = runs[r].table.params[p];
        gpt::for_each_run(local, {t, r}, [&](int64_t l, int64_t f, int64_t n) {
          for (int64_t i = 0; i < n; ++i) got[f + i] = runs[r].grads[local.offset + l + i];
        });
      }
      CHECK(relative_error(got, expected) < 2e-5);
    }
  }
}

}  // namespace

TEST_CASE("the sliced table holds each rank's share and maps back onto the whole model") {
  const gpt::GPTConfig config = gpt::test::small_parallel_model();
  const gpt::ParamTable whole = gpt::make_param_table(config);
  for (int t : {2, 4}) {
    std::vector<int> covered(whole.total, 0);
    for (int r = 0; r < t; ++r) {
      const gpt::ParamTable slice = gpt::make_param_table(config, 1, {t, r});
      int64_t elements = 0;
      for (const gpt::ParamInfo& p : slice.params) elements += p.numel;
      CHECK(slice.total == elements);
      CHECK(slice.units[2].numel == gpt::block_numel(config.hidden, t));
      for (size_t p = 0; p < slice.params.size(); ++p) {
        gpt::for_each_run(slice.params[p], {t, r}, [&](int64_t, int64_t f, int64_t n) {
          for (int64_t i = 0; i < n; ++i) ++covered[whole.params[p].offset + f + i];
        });
      }
    }
    // Split parameters are covered once, replicated ones t times.
    for (const gpt::ParamInfo& p : gpt::make_param_table(config, 1, {t, 0}).params) {
      const gpt::ParamInfo& w = whole.find(p.name);
      const int expected = p.split == gpt::TensorSplit::kReplicated ? t : 1;
      for (int64_t i = 0; i < w.numel; ++i) REQUIRE(covered[w.offset + i] == expected);
    }
  }
  CHECK(gpt::tensor_slice_problem(config, 3).find("does not divide --num-attention-heads 4") !=
        std::string::npos);
}

TEST_CASE("t ranks give the whole model's loss and gradients") {
  for (int t : {2, 4}) {
    for (bool sequence_parallel : {false, true}) {
      CAPTURE(t);
      CAPTURE(sequence_parallel);
      check_against_whole(t, sequence_parallel, Recompute{});
    }
  }
}

// Each checkpointed chunk input is kept as 1/t on every rank instead of whole; the inputs being used take two
// whole slots in turn (so partitioning saves memory once there are more than 2t/(t-1) chunks).
// Each checkpointed chunk input is kept as 1/t on every rank instead of whole; the inputs being used take two
// whole slots in turn (so partitioning saves memory once there are more than 2t/(t-1) chunks). Four layers,
// so that a chunk's input is gone from the two slots by the time the backward needs it.
// Each checkpointed chunk input is kept as 1/t on every rank instead of whole (in device memory, or in host
// memory with cpu_checkpointing); the inputs being used take two whole slots in turn (so partitioning saves
// device memory once there are more than 2t/(t-1) chunks). Four layers, so that a chunk's input is gone from
// the two slots by the time the backward needs it.
TEST_CASE("partitioned activation checkpoints: the same numbers from 1/t of each checkpointed input") {
  const gpt::GPTConfig config = gpt::test::small_parallel_model();
  const int64_t input_bytes = int64_t(kB) * config.seq_len * config.hidden * int64_t(sizeof(float));
  const int t = 2, layers = 4;
  for (bool on_host : {false, true}) {
    for (const std::pair<Recompute, int>& variant :
         {std::pair{Recompute::full(), 4}, std::pair{Recompute::full(gpt::RecomputeMethod::kUniform, 2), 2},
          std::pair{Recompute::full(gpt::RecomputeMethod::kBlock, 3), 3}}) {
      Recompute recompute = variant.first;
      const int chunks = variant.second;
      const std::vector<Run> kept = run_group(t, false, recompute, false, layers);
      recompute.checkpoints_on_host = on_host;
      CAPTURE(recompute.describe());
      const std::vector<Run> partitioned = run_group(t, false, recompute, true, layers);
      // On the device: the parts, or with the parts in host memory the one part on its way back.
      const int64_t parts = on_host ? input_bytes / t : chunks * input_bytes / t;
      for (int r = 0; r < t; ++r) {
        CHECK(partitioned[r].loss == kept[r].loss);
        CHECK(partitioned[r].grads == kept[r].grads);
        CHECK(int64_t(partitioned[r].activation_bytes) ==
              int64_t(kept[r].activation_bytes) + (2 - chunks) * input_bytes + parts);
      }
    }
  }
}

TEST_CASE("tensor parallelism with selective and full recomputation") {
  check_against_whole(2, true, Recompute::selective());
  check_against_whole(2, false, Recompute::full());
  check_against_whole(2, true, Recompute::full(gpt::RecomputeMethod::kUniform, 2));
}

// A backend keeping attention's log-sum-exp (kernels/cpu/flash_cpu_ops.h): each rank keeps its heads'
// [B,NH/t,T] and draws the attention dropout masks at its heads' per-probability offsets, so each rank's loss
// and gradients are those of the ranks keeping the probabilities, within 1e-6 (dropout on).
TEST_CASE("t = 2 ranks keeping the log-sum-exp give the numbers of ranks keeping the probabilities") {
  gpt::FlashCpuOps flash;
  for (bool sequence_parallel : {false, true}) {
    for (const Recompute& recompute : {Recompute{}, Recompute::selective(), Recompute::full()}) {
      CAPTURE(sequence_parallel);
      CAPTURE(recompute.describe());
      const std::vector<Run> probabilities = run_group(2, sequence_parallel, recompute);
      const std::vector<Run> lse = run_group(2, sequence_parallel, recompute, false, 2, flash);
      for (int r = 0; r < 2; ++r) {
        CHECK(std::abs(lse[r].loss - probabilities[r].loss) <= 1e-6 * std::abs(probabilities[r].loss));
        CHECK(relative_error(
                  std::vector<double>(lse[r].grads.begin(), lse[r].grads.end()),
                  std::vector<double>(probabilities[r].grads.begin(), probabilities[r].grads.end())) < 1e-6);
        CHECK(lse[r].activation_bytes < probabilities[r].activation_bytes);
      }
    }
  }
}
