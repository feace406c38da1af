// Memory-centric tiling at the model level: a GPT-2 whose blocks compute their four matrices tile by tile
// (params.h, BlockUnits) has the untiled model's flat layout, forward output and loss bit for bit; in the
// backward each tile's weight and bias gradients are the untiled rows' exactly wherever the gradient flowing
// into the layer is the same (the last block's MLP projection), and the input gradients, sums over tiles,
// move every other gradient by rounding only (within 1e-5 relative, per parameter).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/threads.h"
#include "model/model.h"
#include "tests/model/flat_model.h"

namespace {

gpt::GPTConfig tiling_model() {
  gpt::GPTConfig c;
  c.num_layers = 2;
  c.hidden = 128;  // tiles of whole 16-row groups, 32 rows or more, up to a factor of 4
  c.heads = 4;
  c.seq_len = 32;
  c.max_positions = 32;
  c.vocab = 250;
  return c;
}

// ||a - b|| / ||b|| over one parameter's elements.
double relative_error(const float* a, const float* b, int64_t n) {
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < n; ++i) {
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    norm += double(b[i]) * b[i];
  }
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

struct Pass {
  float loss = 0;
  std::vector<float> logits, grads;
};

Pass run(int tile_factor, bool with_targets) {
  const gpt::GPTConfig config = tiling_model();
  const int B = 2, T = config.seq_len;
  gpt::GPT2<float> model(config, B, tile_factor);
  model.init(5);
  const std::vector<int32_t> x = gpt::test::lcg_tokens(B * T, config.vocab, 11),
                             y = gpt::test::lcg_tokens(B * T, config.vocab, 12);
  Pass p;
  p.loss = model.forward(x.data(), with_targets ? y.data() : nullptr);
  p.logits.assign(model.logits(), model.logits() + int64_t(B) * T * config.padded_vocab());
  if (with_targets) {
    model.backward(1.0f);
    p.grads = model.grads;
  }
  return p;
}

}  // namespace

TEST_CASE("the tiled table cuts only the blocks' units; the flat layout is the untiled one") {
  const gpt::GPTConfig config = tiling_model();
  const gpt::ParamTable whole = gpt::make_param_table(config), tiled = gpt::make_param_table(config, 4);
  CHECK(tiled.total == whole.total);
  REQUIRE(tiled.params.size() == whole.params.size());
  for (size_t i = 0; i < whole.params.size(); ++i) {
    CHECK(tiled.params[i].offset == whole.params[i].offset);
    CHECK(tiled.params[i].name == whole.params[i].name);
  }
  CHECK(tiled.units.size() == whole.units.size() + 2 * (5 + 4 * 4 - 1));
  // Units are back to back, and block 1's c_fc tile 2 holds rows [2*4C/4, 3*4C/4) of c_fc.weight.
  for (size_t u = 1; u < tiled.units.size(); ++u)
    CHECK(tiled.units[u].offset == tiled.units[u - 1].offset + tiled.units[u - 1].numel);
  const gpt::BlockUnits b = tiled.block_units(1);
  const gpt::UnitInfo& tile = tiled.units[b.tile(gpt::BlockLinear::kFc, 2)];
  const int64_t C = config.hidden;
  CHECK(tile.name == "h.1.mlp.c_fc.weight.tile2");
  CHECK(tile.offset == tiled.find("h.1.mlp.c_fc.weight").offset + 2 * C * C);
  CHECK(tile.numel == C * C);
  CHECK(tiled.units[b.small(2)].name == "h.1.attn.c_proj.bias+ln_2");
  CHECK(tiled.units[b.small(2)].offset == tiled.find("h.1.attn.c_proj.bias").offset);
  CHECK(tiled.units[b.small(2)].numel == 3 * C);
  CHECK(tiled.final_norm_unit() == int(tiled.units.size()) - 1);
}

TEST_CASE(
    "a tile factor that does not cut whole 16-row groups of 32 rows or more is refused with the reason") {
  gpt::GPTConfig config = tiling_model();
  CHECK(gpt::tile_factor_problem(config, 4).empty());
  CHECK(gpt::tile_factor_problem(config, 8).find("at least 32 x 8 = 256") != std::string::npos);
  CHECK(gpt::tile_factor_problem(config, 8).find("(1, 2, 4)") != std::string::npos);
  CHECK(gpt::tile_factor_problem(config, 16).find("multiple of 16 x 16") != std::string::npos);
  CHECK(!gpt::tile_factor_problem(config, 0).empty());
  CHECK_THROWS_AS(gpt::make_param_table(config, 3), std::invalid_argument);
}

TEST_CASE("tiled forward: logits and loss equal the untiled model's bit for bit") {
  for (int threads : {1, 2}) {
    gpt::cpu::set_num_threads(threads);
    const Pass whole = run(1, false);
    for (int N : {2, 4}) {
      INFO("threads " << threads << ", tile factor " << N);
      const Pass tiled = run(N, false);
      REQUIRE(tiled.logits.size() == whole.logits.size());
      CHECK(std::memcmp(tiled.logits.data(), whole.logits.data(), whole.logits.size() * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("tiled backward: exact where the incoming gradient is the same, within rounding elsewhere") {
  const gpt::GPTConfig config = tiling_model();
  const gpt::ParamTable table = gpt::make_param_table(config);
  for (int threads : {1, 2}) {
    gpt::cpu::set_num_threads(threads);
    const Pass whole = run(1, true);
    for (int N : {2, 4}) {
      INFO("threads " << threads << ", tile factor " << N);
      const Pass tiled = run(N, true);
      CHECK(tiled.loss == whole.loss);
      double worst = 0;
      for (const gpt::ParamInfo& p : table.params) {
        const float* a = tiled.grads.data() + p.offset;
        const float* b = whole.grads.data() + p.offset;
        // The head and the last block's MLP projection see the same incoming gradient: exact.
        if (p.name == "h.1.mlp.c_proj.weight" || p.name == "h.1.mlp.c_proj.bias" || p.name == "ln_f.weight" ||
            p.name == "ln_f.bias") {
          CHECK_MESSAGE(std::memcmp(a, b, p.numel * sizeof(float)) == 0, p.name);
        }
        const double e = relative_error(a, b, p.numel);
        worst = std::max(worst, e);
        CHECK_MESSAGE(e < 1e-5, p.name << ": relative error " << e);
      }
      MESSAGE("tile factor " << N << ", threads " << threads << ": largest relative gradient error "
                             << worst);
    }
  }
}
