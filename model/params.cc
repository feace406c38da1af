// Builds the parameter table in the unit-major flat layout described in params.h.
#include "model/params.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

namespace gpt {

int64_t block_numel(int C, int t) {
  const int64_t c = C, s = C / t;
  return 12 * c * s + 6 * c + 7 * s;
}

std::string tensor_slice_problem(const GPTConfig& config, int size) {
  auto n = [](int v) { return std::to_string(v); };
  const std::string flag = "--tensor-model-parallel-size " + n(size);
  if (size < 1) return flag + ": the tensor-parallel size must be at least 1";
  if (config.heads % size != 0)
    return flag + " does not divide --num-attention-heads " + n(config.heads) +
           ": each rank computes whole heads";
  if (config.hidden % size != 0) return flag + " does not divide --hidden-size " + n(config.hidden);
  if (config.padded_vocab() % size != 0)
    return flag + " does not divide the padded vocabulary " + n(config.padded_vocab()) +
           " (the vocabulary rounded up to a multiple of 128)";
  return "";
}

std::string tiled_slice_problem(int tile_factor, int size) {
  if (size <= 1 || tile_factor <= 1) return "";
  return "--tile-factor " + std::to_string(tile_factor) + " and --tensor-model-parallel-size " +
         std::to_string(size) +
         ": memory-centric tiling and tensor parallelism do not combine yet; drop one of them";
}

std::string sequence_split_problem(const GPTConfig& config, int size) {
  if (size < 1 || config.seq_len % size == 0) return "";
  return "--sequence-parallel splits --seq-length " + std::to_string(config.seq_len) +
         " over --tensor-model-parallel-size " + std::to_string(size) +
         ": choose a sequence length divisible by " + std::to_string(size);
}

std::string tensor_parallel_node_problem(int t, int ranks_per_node, const std::string& node_flag) {
  if (t < 1 || ranks_per_node % t == 0) return "";
  return "--tensor-model-parallel-size " + std::to_string(t) + " does not divide " + node_flag + " " +
         std::to_string(ranks_per_node) +
         "; a tensor-parallel group must stay inside one node (our rule): choose a divisor of it";
}

Problems ParallelLayout::problems(const GPTConfig& model) const {
  Problems found;
  const int t = tensor_parallel;
  auto add = [&found](std::string problem) {
    if (!problem.empty()) found.push_back(std::move(problem));
  };
  if (ranks_per_node > 0) add(tensor_parallel_node_problem(t, ranks_per_node, node_flag));
  if (t == 1) {
    if (sequence_parallel) add("sequence parallelism needs a tensor-parallel group");
    return found;
  }
  add(tensor_slice_problem(model, t));
  if (sequence_parallel) add(sequence_split_problem(model, t));
  add(tiled_slice_problem(tile_factor, t));
  return found;
}

const ParamInfo& ParamTable::find(const std::string& name) const {
  for (const ParamInfo& p : params) {
    if (p.name == name) return p;
  }
  throw std::out_of_range("no parameter named '" + name + "' in the GPT-2 parameter table");
}

std::string tile_factor_problem(const GPTConfig& config, int tile_factor) {
  if (tile_factor < 1) return "the tile factor must be at least 1, got " + std::to_string(tile_factor);
  // The narrowest matrix has C output rows (3C and 4C follow), so the factors that tile are the divisors of
  // the C/16 groups of 16 rows that leave tiles of at least two groups: a tiled GEMM matches the untiled one
  // bit for bit only in tiles of two or more of Eigen's packets (32 floats with AVX-512), and the same
  // factors should work on every machine.
  const int groups = config.hidden % 16 == 0 ? config.hidden / 16 : 0;
  auto tiles = [&](int d) { return d == 1 || (groups > 0 && groups % d == 0 && groups / d >= 2); };
  if (tiles(tile_factor)) return "";
  std::string divisors;
  for (int d = 1; d <= std::min(groups, 64); ++d) {
    if (tiles(d)) divisors += (divisors.empty() ? "" : ", ") + std::to_string(d);
  }
  const std::string fix = groups > 0
                              ? "; choose a factor that divides hidden/16 = " + std::to_string(groups) +
                                    " and leaves tiles of 32 or more (" + divisors + ")"
                              : "; the hidden size is no multiple of 16: use 1 (no tiling)";
  return "tile factor " + std::to_string(tile_factor) + " needs the hidden size to be a multiple of 16 x " +
         std::to_string(tile_factor) + " = " + std::to_string(16 * tile_factor) + " and at least 32 x " +
         std::to_string(tile_factor) + " = " + std::to_string(32 * tile_factor) +
         " (tiles of whole 16-row groups, 32 rows or more), but it is " + std::to_string(config.hidden) + fix;
}

namespace {

// Builds the table's params and units; `open_unit` starts a unit at the current end of the flat layout.
class TableBuilder {
 public:
  explicit TableBuilder(ParamTable& table) : table_(table) {}

  void open_unit(const std::string& name) { table_.units.push_back({name, table_.total, 0}); }
  // A parameter of the whole model's `shape`, of which this rank holds its slice.
  void add(const std::string& name, std::vector<int64_t> shape, int layer, bool decay,
           TensorSplit split = TensorSplit::kReplicated, int row_groups = 1) {
    ParamInfo p;
    p.name = name;
    p.full_shape = shape;
    p.split = split;
    p.row_groups = row_groups;
    const int64_t t = table_.slice.size;
    if (split == TensorSplit::kRows) shape[0] /= t;
    if (split == TensorSplit::kColumns) shape[1] /= t;
    p.numel = 1;
    for (int64_t d : shape) p.numel *= d;
    p.shape = std::move(shape);
    p.unit = static_cast<int>(table_.units.size()) - 1;
    p.layer = layer;
    p.offset = table_.total;
    p.weight_decay = decay;
    grow(p.numel);
    table_.params.push_back(std::move(p));
  }
  // A matrix of `rows` x `cols` whose rows are cut into tile units of rows / tiles each.
  void add_tiled(const std::string& name, int64_t rows, int64_t cols, int layer, int tiles) {
    ParamInfo p;
    p.name = name;
    p.shape = p.full_shape = {rows, cols};
    p.numel = rows * cols;
    p.unit = static_cast<int>(table_.units.size());
    p.layer = layer;
    p.offset = table_.total;
    p.weight_decay = true;
    table_.params.push_back(std::move(p));
    for (int k = 0; k < tiles; ++k) {
      open_unit(name + ".tile" + std::to_string(k));
      grow(rows / tiles * cols);
    }
  }

 private:
  void grow(int64_t n) {
    table_.total += n;
    table_.units.back().numel += n;
  }
  ParamTable& table_;
};

void add_block(TableBuilder& b, int64_t C, int l, int tiles) {
  const std::string h = "h." + std::to_string(l) + ".";
  // The order here must match block_params() in params.h.
  if (tiles == 1) {
    b.open_unit("h." + std::to_string(l));
    b.add(h + "ln_1.weight", {C}, l, false);
    b.add(h + "ln_1.bias", {C}, l, false);
    // Column-parallel qkv (each rank's heads: their queries, keys and values) and c_fc, row-parallel
    // projections; the rest is replicated.
    b.add(h + "attn.c_attn.weight", {3 * C, C}, l, true, TensorSplit::kRows, 3);
    b.add(h + "attn.c_attn.bias", {3 * C}, l, false, TensorSplit::kRows, 3);
    b.add(h + "attn.c_proj.weight", {C, C}, l, true, TensorSplit::kColumns);
    b.add(h + "attn.c_proj.bias", {C}, l, false);
    b.add(h + "ln_2.weight", {C}, l, false);
    b.add(h + "ln_2.bias", {C}, l, false);
    b.add(h + "mlp.c_fc.weight", {4 * C, C}, l, true, TensorSplit::kRows);
    b.add(h + "mlp.c_fc.bias", {4 * C}, l, false, TensorSplit::kRows);
    b.add(h + "mlp.c_proj.weight", {C, 4 * C}, l, true, TensorSplit::kColumns);
    b.add(h + "mlp.c_proj.bias", {C}, l, false);
    return;
  }
  // Tiled: the units of BlockUnits (params.h), in the same flat layout.
  b.open_unit(h + "ln_1");
  b.add(h + "ln_1.weight", {C}, l, false);
  b.add(h + "ln_1.bias", {C}, l, false);
  b.add_tiled(h + "attn.c_attn.weight", 3 * C, C, l, tiles);
  b.open_unit(h + "attn.c_attn.bias");
  b.add(h + "attn.c_attn.bias", {3 * C}, l, false);
  b.add_tiled(h + "attn.c_proj.weight", C, C, l, tiles);
  b.open_unit(h + "attn.c_proj.bias+ln_2");
  b.add(h + "attn.c_proj.bias", {C}, l, false);
  b.add(h + "ln_2.weight", {C}, l, false);
  b.add(h + "ln_2.bias", {C}, l, false);
  b.add_tiled(h + "mlp.c_fc.weight", 4 * C, C, l, tiles);
  b.open_unit(h + "mlp.c_fc.bias");
  b.add(h + "mlp.c_fc.bias", {4 * C}, l, false);
  b.add_tiled(h + "mlp.c_proj.weight", C, 4 * C, l, tiles);
  b.open_unit(h + "mlp.c_proj.bias");
  b.add(h + "mlp.c_proj.bias", {C}, l, false);
}

}  // namespace

ParamTable make_param_table(const GPTConfig& config, int tile_factor, TensorSlice slice) {
  if (std::string problem = tile_factor_problem(config, tile_factor); !problem.empty())
    throw std::invalid_argument(problem);
  if (std::string problem = tensor_slice_problem(config, slice.size); !problem.empty())
    throw std::invalid_argument(problem);
  if (std::string problem = tiled_slice_problem(tile_factor, slice.size); !problem.empty())
    throw std::invalid_argument(problem);
  const int64_t C = config.hidden;
  ParamTable table;
  table.tile_factor = tile_factor;
  table.slice = slice;
  TableBuilder b(table);
  b.open_unit("wte");
  b.add("wte", {config.padded_vocab(), C}, -1, true, TensorSplit::kRows);
  b.open_unit("wpe");
  b.add("wpe", {config.max_positions, C}, -1, true);
  for (int l = 0; l < config.num_layers; ++l) add_block(b, C, l, tile_factor);
  b.open_unit("ln_f");
  b.add("ln_f.weight", {C}, -1, false);
  b.add("ln_f.bias", {C}, -1, false);
  return table;
}

std::vector<float> part_of_whole_model(const ParamTable& part, const ParamTable& whole,
                                       const float* whole_values) {
  std::vector<float> values(size_t(part.total), 0.0f);
  for (size_t k = 0; k < part.params.size(); ++k) {
    const ParamInfo& p = part.params[k];
    if (p.numel == 0) continue;
    for_each_run(p, part.slice, [&](int64_t local, int64_t at, int64_t n) {
      std::copy_n(whole_values + whole.params[k].offset + at, n, values.begin() + p.offset + local);
    });
  }
  return values;
}

void place_in_whole_model(const ParamTable& part, const float* part_values, const ParamTable& whole,
                          float* whole_values) {
  for (size_t k = 0; k < part.params.size(); ++k) {
    const ParamInfo& p = part.params[k];
    if (p.numel == 0) continue;
    for_each_run(p, part.slice, [&](int64_t local, int64_t at, int64_t n) {
      std::copy_n(part_values + p.offset + local, n, whole_values + whole.params[k].offset + at);
    });
  }
}

}  // namespace gpt
