// Builds the parameter table in the unit-major flat layout described in params.h.
#include "model/params.h"

#include <stdexcept>

namespace gpt {

int64_t block_numel(int C) {
  return 12LL * C * C + 13LL * C;
}

const ParamInfo& ParamTable::find(const std::string& name) const {
  for (const ParamInfo& p : params) {
    if (p.name == name) return p;
  }
  throw std::out_of_range("no parameter named '" + name + "' in the GPT-2 parameter table");
}

ParamTable make_param_table(const GPTConfig& config) {
  const int64_t C = config.hidden;
  ParamTable table;
  auto open_unit = [&](const std::string& name) {
    table.units.push_back({name, table.total, 0, static_cast<int>(table.params.size()), 0});
  };
  auto add = [&](const std::string& name, std::vector<int64_t> shape, int layer, bool decay) {
    ParamInfo p;
    p.name = name;
    p.numel = 1;
    for (int64_t d : shape) p.numel *= d;
    p.shape = std::move(shape);
    p.unit = static_cast<int>(table.units.size()) - 1;
    p.layer = layer;
    p.offset = table.total;
    p.weight_decay = decay;
    table.total += p.numel;
    UnitInfo& unit = table.units.back();
    unit.numel += p.numel;
    unit.num_params += 1;
    table.params.push_back(std::move(p));
  };

  open_unit("wte");
  add("wte", {config.padded_vocab(), C}, -1, true);
  open_unit("wpe");
  add("wpe", {config.max_positions, C}, -1, true);
  for (int l = 0; l < config.num_layers; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    open_unit("h." + std::to_string(l));
    // The order here must match block_params() in params.h.
    add(h + "ln_1.weight", {C}, l, false);
    add(h + "ln_1.bias", {C}, l, false);
    add(h + "attn.c_attn.weight", {3 * C, C}, l, true);
    add(h + "attn.c_attn.bias", {3 * C}, l, false);
    add(h + "attn.c_proj.weight", {C, C}, l, true);
    add(h + "attn.c_proj.bias", {C}, l, false);
    add(h + "ln_2.weight", {C}, l, false);
    add(h + "ln_2.bias", {C}, l, false);
    add(h + "mlp.c_fc.weight", {4 * C, C}, l, true);
    add(h + "mlp.c_fc.bias", {4 * C}, l, false);
    add(h + "mlp.c_proj.weight", {C, 4 * C}, l, true);
    add(h + "mlp.c_proj.bias", {C}, l, false);
  }
  open_unit("ln_f");
  add("ln_f.weight", {C}, -1, false);
  add("ln_f.bias", {C}, -1, false);
  return table;
}

}  // namespace gpt
