// The parameter table: every GPT-2 parameter's name, shape, gather unit and flat offset. The ZeRO engine
// partitions by this table; the model finds a layer's weights through it. The flat layout is unit-major
// (wte, wpe, block 0 .. L-1, ln_f) so each gather unit is one contiguous range.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"

namespace gpt {

struct ParamInfo {
  std::string name;            // GPT-2 (Hugging Face) naming: "h.3.attn.c_attn.weight"
  std::vector<int64_t> shape;  // row-major; linear weights are [out, in]
  int unit = 0;                // index into ParamTable::units
  int layer = -1;              // transformer block index, -1 outside the blocks
  int64_t offset = 0;          // first element in the flat parameter vector
  int64_t numel = 0;
  bool weight_decay = false;  // AdamW decays matrices and embeddings, not biases or LayerNorm
};

// A gather unit: the contiguous range that stage 3 gathers at once.
struct UnitInfo {
  std::string name;  // "wte", "wpe", "h.0" .. "h.{L-1}", "ln_f"
  int64_t offset = 0;
  int64_t numel = 0;
  int first_param = 0;
  int num_params = 0;
};

struct ParamTable {
  std::vector<ParamInfo> params;
  std::vector<UnitInfo> units;
  int64_t total = 0;  // elements in the flat vector

  // Unit indices, in forward order.
  static constexpr int kWte = 0;
  static constexpr int kWpe = 1;
  static int block_unit(int layer) { return 2 + layer; }
  int final_norm_unit() const { return static_cast<int>(units.size()) - 1; }

  const ParamInfo& find(const std::string& name) const;  // throws std::out_of_range naming it
};

ParamTable make_param_table(const GPTConfig& config);

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
