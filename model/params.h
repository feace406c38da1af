// The parameter table: every GPT-2 parameter's name, shape, gather unit and flat offset. The ZeRO engine
// partitions by this table; the model finds a layer's weights through it. The flat layout is unit-major
// (wte, wpe, block 0 .. L-1, ln_f) so each gather unit is one contiguous range.
//
// Memory-centric tiling (ZeRO-Infinity) changes only where the units of a block begin and end, never the flat
// layout: with tile factor N > 1 each of a block's four matrices is N units of OC/N rows, so stage 3 gathers,
// computes and releases one tile at a time, and the block's LayerNorms and biases, which sit between the
// matrices in the flat layout, form five small units around them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"

namespace gpt {

struct ParamInfo {
  std::string name;            // GPT-2 (Hugging Face) naming: "h.3.attn.c_attn.weight"
  std::vector<int64_t> shape;  // row-major; linear weights are [out, in]
  int unit = 0;                // index into ParamTable::units: the unit of its first element
  int layer = -1;              // transformer block index, -1 outside the blocks
  int64_t offset = 0;          // first element in the flat parameter vector
  int64_t numel = 0;
  bool weight_decay = false;  // AdamW decays matrices and embeddings, not biases or LayerNorm
};

// A gather unit: the contiguous range that stage 3 gathers at once.
struct UnitInfo {
  std::string name;  // "wte", "wpe", "h.0" .. "h.{L-1}", "ln_f"; tiled blocks: see BlockUnits
  int64_t offset = 0;
  int64_t numel = 0;
};

// The four matrices of a block, in the order of the flat layout.
enum class BlockLinear { kQkv = 0, kAttnProj = 1, kFc = 2, kFcProj = 3 };

// Where block l's parameters sit among the units. Untiled (tiles == 1) the block is the one unit `first`.
// Tiled, its units in flat-layout order are
//   small(0) "h.l.ln_1"                  ln_1 weight and bias
//   tile(kQkv, 0 .. N-1)                 "h.l.attn.c_attn.weight.tile<k>": rows [k*3C/N, (k+1)*3C/N)
//   small(1) "h.l.attn.c_attn.bias"
//   tile(kAttnProj, ..)                  "h.l.attn.c_proj.weight.tile<k>"
//   small(2) "h.l.attn.c_proj.bias+ln_2" the attention projection's bias and ln_2
//   tile(kFc, ..)                        "h.l.mlp.c_fc.weight.tile<k>"
//   small(3) "h.l.mlp.c_fc.bias"
//   tile(kFcProj, ..)                    "h.l.mlp.c_proj.weight.tile<k>"
//   small(4) "h.l.mlp.c_proj.bias"
struct BlockUnits {
  static constexpr int kSmallUnits = 5;
  int first = 0;
  int tiles = 1;

  // Block `layer`'s units at tile factor N: wte and wpe come first, each block takes count() units.
  static BlockUnits of(int layer, int N) { return {2 + layer * BlockUnits{0, N}.count(), N}; }
  int count() const { return tiles == 1 ? 1 : kSmallUnits + 4 * tiles; }
  int small(int i) const { return first + i + tiles * i; }
  int tile(BlockLinear linear, int k) const { return first + 1 + (tiles + 1) * int(linear) + k; }
};
struct ParamTable {
  std::vector<ParamInfo> params;
  std::vector<UnitInfo> units;
  int64_t total = 0;  // elements in the flat vector
  int tile_factor = 1;

  // Unit indices, in forward order.
  static constexpr int kWte = 0;
  static constexpr int kWpe = 1;
  BlockUnits block_units(int layer) const { return BlockUnits::of(layer, tile_factor); }
  // The first unit of block `layer` (its only one when untiled).
  int block_unit(int layer) const { return block_units(layer).first; }
  int final_norm_unit() const { return static_cast<int>(units.size()) - 1; }

  const ParamInfo& find(const std::string& name) const;  // throws std::out_of_range naming it
};

// tile_factor N > 1: memory-centric tiling of the blocks' matrices (see BlockUnits); 3C, C and 4C must be
// multiples of N (check_tile_factor).
ParamTable make_param_table(const GPTConfig& config, int tile_factor = 1);
// Why `tile_factor` cannot tile this model's blocks (empty when it can): tiles of output rows must be whole
// multiples of 16, so the CPU's GEMM cuts them where the untiled layer's cuts fall.
std::string tile_factor_problem(const GPTConfig& config, int tile_factor);

// Offsets of each parameter inside one block unit, relative to the unit's start. Templated on the pointer
// type so the same layout serves weights (const Real*) and gradients (Real*).
template <typename Ptr>
struct BlockParams {
  Ptr ln1_w, ln1_b;              // [C], [C]
  Ptr qkv_w, qkv_b;              // [3C, C], [3C]
  Ptr attn_proj_w, attn_proj_b;  // [C, C], [C]
  Ptr ln2_w, ln2_b;              // [C], [C]
  Ptr fc_w, fc_b;                // [4C, C], [4C]
  Ptr fc_proj_w, fc_proj_b;      // [C, 4C], [C]
};

// Element count of one block: 12 C^2 + 13 C.
int64_t block_numel(int C);

template <typename Ptr>
BlockParams<Ptr> block_params(Ptr unit_base, int C) {
  const int64_t c = C;
  BlockParams<Ptr> p;
  Ptr at = unit_base;
  auto take = [&at](int64_t n) {
    Ptr here = at;
    at += n;
    return here;
  };
  p.ln1_w = take(c);
  p.ln1_b = take(c);
  p.qkv_w = take(3 * c * c);
  p.qkv_b = take(3 * c);
  p.attn_proj_w = take(c * c);
  p.attn_proj_b = take(c);
  p.ln2_w = take(c);
  p.ln2_b = take(c);
  p.fc_w = take(4 * c * c);
  p.fc_b = take(4 * c);
  p.fc_proj_w = take(4 * c * c);
  p.fc_proj_b = take(c);
  return p;
}

}  // namespace gpt
