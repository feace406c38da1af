// Tensor parallelism over MPI: the world's ranks form one tensor-parallel group whose collectives run
// through the communicator (zero/tensor_group.h, CommTensorGroup). Every rank also computes the whole model
// alone; the group's loss equals it within 1e-5 relative and each rank's gradient slice equals the whole
// model's elements within fp32 rounding, with and without sequence parallelism (dropout on). The meter counts
// the layers' collectives in tp_fwd and tp_bwd and nothing else.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "model/loop.h"
#include "model/model.h"
#include "tests/comm/mpi_test_env.h"
#include "tests/model/flat_model.h"
#include "zero/tensor_group.h"

namespace {

gpt::comm::Communicator& world() {
  return gpt::comm::testing::world();
}

constexpr int kB = 2;

struct Result {
  float loss = 0;
  std::vector<float> grads;
};

// One forward and backward with dropout on; group null: the whole model.
Result run(gpt::LayerLoop<float>& loop, std::vector<float> params) {
  const gpt::GPTConfig config = gpt::test::small_parallel_model();
  std::vector<int32_t> x(kB * config.seq_len), y(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = int32_t((i * 37 + 11) % config.vocab);
    y[i] = int32_t((i * 53 + 7) % config.vocab);
  }
  const int64_t windows[kB] = {3, 4};
  gpt::test::FlatSlices slices(loop.table(), std::move(params));
  Result r;
  r.loss = loop.forward(slices, x.data(), y.data(), gpt::Dropout{0.1, 0.1, 5, windows}, true);
  loop.backward(slices, slices, 1.0f);
  r.grads = slices.grads;
  return r;
}

}  // namespace

TEST_CASE("the world as one tensor-parallel group equals the whole model") {
  const int t = world().size();
  const gpt::GPTConfig config = gpt::test::small_parallel_model();
  gpt::GPT2<float> init(config, kB);
  init.init(21);
  gpt::Arena whole_arena;
  gpt::LayerLoop<float> whole_loop(config, kB, gpt::Recompute{}, gpt::cpu_ops(), whole_arena);
  const Result whole = run(whole_loop, init.params);
  const gpt::ParamTable& whole_table = whole_loop.table();

  for (bool sequence_parallel : {false, true}) {
    CAPTURE(sequence_parallel);
    gpt::Arena device, wire("wire", gpt::Arena::kUnlimited, &gpt::cpu_ops().wire_memory());
    gpt::EventLog events(false);
    gpt::CommTensorGroup group(world(), gpt::EngineContext{gpt::cpu_ops(), device, wire, events});
    gpt::LayerLoop<float> loop(config, kB, gpt::Recompute::selective(), gpt::cpu_ops(), device, 1,
                               gpt::TensorParallel{&group, sequence_parallel});
    const gpt::TensorSlice slice{t, world().rank()};
    const gpt::comm::TrafficCounts before = world().meter().snapshot();
    const Result tp = run(loop, gpt::test::slice_weights(init.params, whole_table, loop.table()));
    const gpt::comm::TrafficCounts used = world().meter().snapshot() - before;

    CHECK(std::abs(tp.loss - whole.loss) <= 1e-5 * std::abs(whole.loss));
    double diff = 0, norm = 0;
    for (size_t p = 0; p < whole_table.params.size(); ++p) {
      const gpt::ParamInfo& local = loop.table().params[p];
      gpt::for_each_run(local, slice, [&](int64_t l, int64_t f, int64_t n) {
        for (int64_t i = 0; i < n; ++i) {
          const double a = tp.grads[local.offset + l + i],
                       b = whole.grads[whole_table.params[p].offset + f + i];
          diff += (a - b) * (a - b);
          norm += b * b;
        }
      });
    }
    CHECK(std::sqrt(diff / norm) < 2e-5);
    using gpt::comm::Phase;
    CHECK(used.at(Phase::kTpFwd) > 0);
    CHECK(used.at(Phase::kTpBwd) > 0);
    CHECK(used.total() == used.at(Phase::kTpFwd) + used.at(Phase::kTpBwd));
  }
}
