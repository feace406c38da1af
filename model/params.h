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

// Tensor parallelism (Megatron): which of `size` slices of the model this rank holds. Column-parallel
// matrices (qkv, the MLP's first) and their biases are split by output rows, row-parallel ones (the attention
// and MLP projections) by input columns, the embedding by vocabulary rows; LayerNorms, the row-parallel
// layers' biases and the position embedding are replicated. size 1 is the whole model.
struct TensorSlice {
  int size = 1;
  int rank = 0;
};

// How a parameter is divided over a tensor-parallel group.
enum class TensorSplit {
  kReplicated,  // every rank holds all of it
  kRows,        // rank r holds rows [r R/t, (r+1) R/t) of each of `row_groups` equal groups of rows
  kColumns,     // rank r holds columns [r K/t, (r+1) K/t) of every row
};

struct ParamInfo {
  std::string name;            // GPT-2 (Hugging Face) naming: "h.3.attn.c_attn.weight"
  std::vector<int64_t> shape;  // row-major; linear weights are [out, in]; this rank's slice of full_shape
  std::vector<int64_t> full_shape;  // the whole parameter's
  TensorSplit split = TensorSplit::kReplicated;
  int row_groups = 1;  // kRows: qkv's rows are three groups (queries, keys, values), each split
  int unit = 0;        // index into ParamTable::units: the unit of its first element
  int layer = -1;      // transformer block index, -1 outside the blocks
  int64_t offset = 0;  // first element in the flat parameter vector
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
  TensorSlice slice;
  // A pipeline stage's table (model/pipeline.h, stage_param_table): the units the stage does not run are
  // empty, the rest packed; indices and names are the whole model's.
  bool pipeline_stage = false;

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
// multiples of N (check_tile_factor). slice: this rank's tensor-parallel slice (tensor_slice_problem must be
// empty; tiling and tensor parallelism do not combine yet).
ParamTable make_param_table(const GPTConfig& config, int tile_factor = 1, TensorSlice slice = {});
// Why the model cannot be split over `size` tensor-parallel ranks (empty when it can): the heads, the hidden
// size and the padded vocabulary must be multiples of it.
std::string tensor_slice_problem(const GPTConfig& config, int size);
// Why memory-centric tiling (tile_factor) cannot combine with `size` tensor-parallel ranks (empty when it
// can): the rule's one home, asked through ParallelLayout::problems.
std::string tiled_slice_problem(int tile_factor, int size);
// Why sequence parallelism cannot split this model's sequence over `size` ranks (empty when it can): the
// sequence length must be a multiple of it. The rule's one home, asked through ParallelLayout::problems.
std::string sequence_split_problem(const GPTConfig& config, int size);
// Why t tensor-parallel ranks cannot stay inside nodes of ranks_per_node ranks, which the user sets with
// node_flag (empty when they can; our rule: a tensor-parallel group is t consecutive ranks of one node).
std::string tensor_parallel_node_problem(int t, int ranks_per_node, const std::string& node_flag);

// How the world is cut for tensor parallelism (Megatron's t x d layout) and what rides on it, with the rules
// that tie t to the cluster and to the model: t divides the ranks per node, the heads, the hidden size and
// the padded vocabulary; sequence parallelism needs t > 1 and a sequence length divisible by t; tiling does
// not combine with t > 1 yet. gpt_train's options, the planner, the engine and the checkpoint manifest ask
// it.
struct ParallelLayout {
  int tensor_parallel = 1;                     // t
  int ranks_per_node = 0;                      // 0: not known here, so the node rule is not checked
  std::string node_flag = "--ranks-per-node";  // the flag that sets ranks_per_node, named in its message
  bool sequence_parallel = false;              // --sequence-parallel
  int tile_factor = 1;                         // --tile-factor (memory-centric tiling)

  // Every rule this layout breaks for the model, one line each naming the flags and the fix.
  Problems problems(const GPTConfig& model) const;
};

// The runs of a sliced parameter's elements in the whole parameter: f(local, whole, length) for each run of
// `length` consecutive elements at offset `local` in the slice and `whole` in the whole parameter (both
// relative to the parameter's start), in local order. A replicated parameter is one run.
template <typename F>
void for_each_run(const ParamInfo& p, const TensorSlice& s, F&& f);

// A rank's part of the whole model and back, parameter by parameter (every table lists the same parameters
// in the same order, whatever its slice, tile factor or pipeline stage): `part` is a rank's table (a
// tensor-parallel slice, a pipeline stage's table, or both), `whole` make_param_table(model) of the same
// model. part_of_whole_model cuts the rank's values (in part's layout) out of the whole model's;
// place_in_whole_model puts a part's values back where they sit in the whole model. Parameters the part does
// not hold (a pipeline stage's emptied ones) are skipped.
std::vector<float> part_of_whole_model(const ParamTable& part, const ParamTable& whole,
                                       const float* whole_values);
void place_in_whole_model(const ParamTable& part, const float* part_values, const ParamTable& whole,
                          float* whole_values);
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

// Element count of one block: 12 C^2 + 13 C; on each of t tensor-parallel ranks 12 C^2/t + 6 C + 7 C/t.
int64_t block_numel(int C, int t = 1);

// The block unit's layout on one of t tensor-parallel ranks (t = 1: the whole block).
template <typename Ptr>
BlockParams<Ptr> block_params(Ptr unit_base, int C, int t = 1) {
  const int64_t c = C, s = C / t;  // s: this rank's share of C
  BlockParams<Ptr> p;
  Ptr at = unit_base;
  auto take = [&at](int64_t n) {
    Ptr here = at;
    at += n;
    return here;
  };
  p.ln1_w = take(c);
  p.ln1_b = take(c);
  p.qkv_w = take(3 * s * c);
  p.qkv_b = take(3 * s);
  p.attn_proj_w = take(c * s);
  p.attn_proj_b = take(c);
  p.ln2_w = take(c);
  p.ln2_b = take(c);
  p.fc_w = take(4 * s * c);
  p.fc_b = take(4 * s);
  p.fc_proj_w = take(4 * s * c);
  p.fc_proj_b = take(c);
  return p;
}

template <typename F>
void for_each_run(const ParamInfo& p, const TensorSlice& s, F&& f) {
  const int64_t t = s.size, r = s.rank;
  if (p.split == TensorSplit::kReplicated || t == 1) {
    f(int64_t(0), int64_t(0), p.numel);
    return;
  }
  const int64_t rows = p.full_shape[0], cols = p.full_shape.size() > 1 ? p.full_shape[1] : 1;
  if (p.split == TensorSplit::kRows) {
    const int64_t group = rows / p.row_groups, mine = group / t;  // rows per group, and this rank's share
    for (int64_t g = 0; g < p.row_groups; ++g) f(g * mine * cols, (g * group + r * mine) * cols, mine * cols);
    return;
  }
  const int64_t mine = cols / t;
  for (int64_t row = 0; row < rows; ++row) f(row * mine, row * cols + r * mine, mine);
}

}  // namespace gpt
