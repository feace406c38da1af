// Shared by the tests that drive the layer loop directly: the model's flat vectors as its weight source and
// gradient sink, reproducible token streams, and a tensor-parallel slice's weights cut from the whole
// model's (make_param_table's TensorSlice, mapped through for_each_run).
#pragma once

#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "model/config.h"
#include "model/loop.h"
#include "model/params.h"

namespace gpt::test {

// A small model that 1, 2 and 4 tensor-parallel ranks divide: 2 layers unless told, hidden 64, 4 heads, 16
// positions, a vocabulary of 200 (padded to 256).
inline GPTConfig small_parallel_model(int layers = 2) {
  GPTConfig c;
  c.num_layers = layers;
  c.hidden = 64;
  c.heads = 4;
  c.seq_len = 16;
  c.max_positions = 16;
  c.vocab = 200;
  return c;
}

// A backend that asks the loop for the fused classifier (Ops::fuses_classifier), as CUDA's does: the CPU
// then runs the chunked default ops (kernels/ops.cc).
template <typename Base>
class Fusing final : public Base {
 public:
  bool fuses_classifier() const override { return true; }
};

// Slices of flat parameter and gradient vectors in a table's layout; gradients accumulate in place.
class FlatSlices : public WeightSource<float>, public GradientSink<float> {
 public:
  FlatSlices(const ParamTable& table, std::vector<float> weights)
      : params(std::move(weights)), grads(table.total, 0.0f), table_(table) {}
  void begin_pass(Pass, const std::vector<int>&) override {}
  WeightView acquire(int unit) override { return params.data() + table_.units[unit].offset; }
  void release(int) override {}
  float* open(int unit) override { return grads.data() + table_.units[unit].offset; }
  void ready(int) override {}

  std::vector<float> params, grads;

 protected:
  const ParamTable& table_;
};

// n tokens below vocab from a linear congruential generator seeded with `seed`.
inline std::vector<int32_t> lcg_tokens(int n, int vocab, uint32_t seed) {
  std::vector<int32_t> out(n);
  for (auto& t : out) {
    seed = seed * 1664525u + 1013904223u;
    t = int32_t((seed >> 8) % uint32_t(vocab));
  }
  return out;
}

// The weights of the slice that `sliced` describes (a table of the same model), cut from the whole model's
// flat vector `whole` (layout of whole_table).
inline std::vector<float> slice_weights(const std::vector<float>& whole, const ParamTable& whole_table,
                                        const ParamTable& sliced) {
  std::vector<float> mine(sliced.total);
  for (size_t p = 0; p < sliced.params.size(); ++p) {
    const ParamInfo& local = sliced.params[p];
    const float* from = whole.data() + whole_table.params[p].offset;
    for_each_run(local, sliced.slice, [&](int64_t l, int64_t f, int64_t n) {
      std::memcpy(mine.data() + local.offset + l, from + f, n * sizeof(float));
    });
  }
  return mine;
}

}  // namespace gpt::test
