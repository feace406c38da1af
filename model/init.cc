// GPT-2 initialization over a range of the flat parameter vector; see init.h.
#include "model/init.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/common/random.h"

namespace gpt {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// How a parameter starts: every element `constant`, or drawn from N(0, std) keyed by its index in the whole
// model's flat vector, except the whole model's elements from `real_end` on (wte's padded rows), which are 0.
struct InitRule {
  bool random = false;
  double constant = 0, std = 0;
  int64_t real_end = 0;  // relative to the parameter's start in the whole model
};

InitRule init_rule(const GPTConfig& config, const ParamInfo& p) {
  if (ends_with(p.name, ".bias")) return {};
  if (ends_with(p.name, "ln_1.weight") || ends_with(p.name, "ln_2.weight") || p.name == "ln_f.weight")
    return {false, 1.0};
  const double std = ends_with(p.name, "attn.c_proj.weight") || ends_with(p.name, "mlp.c_proj.weight")
                         ? 0.02 / std::sqrt(2.0 * config.num_layers)
                         : 0.02;
  // wte rows at and beyond V are the padding: zero, and they stay zero through training.
  const int64_t whole_numel = p.full_shape[0] * (p.full_shape.size() > 1 ? p.full_shape[1] : 1);
  return {true, 0.0, std, p.name == "wte" ? int64_t(config.vocab) * config.hidden : whole_numel};
}

}  // namespace

template <typename Real>
void init_gpt2_params(const GPTConfig& config, const ParamTable& table, uint64_t seed, int64_t begin,
                      int64_t end, Real* out) {
  const uint64_t key =
      random::derive_key(seed, 0x6770743269ULL);  // "gpt2i": separates init from other streams
  // A tensor-parallel slice or a pipeline stage draws the numbers of the whole model's elements it holds, so
  // any t and p start from the weights of t = p = 1. Tiling never moves an element, so the untiled whole
  // table gives every offset.
  const bool part = table.slice.size > 1 || table.pipeline_stage;
  const ParamTable whole = part ? make_param_table(config) : ParamTable{};
  for (size_t k = 0; k < table.params.size(); ++k) {
    const ParamInfo& p = table.params[k];
    if (p.numel == 0) continue;  // a unit another pipeline stage runs
    const int64_t whole_offset = part ? whole.params[k].offset : p.offset;
    const InitRule rule = init_rule(config, p);
    for_each_run(p, table.slice, [&](int64_t local, int64_t whole_at, int64_t n) {
      const int64_t lo = std::max(begin, p.offset + local), hi = std::min(end, p.offset + local + n);
      for (int64_t i = lo; i < hi; ++i) {
        const int64_t in_param = whole_at + (i - p.offset - local);  // in the whole parameter
        out[i - begin] =
            rule.random && in_param < rule.real_end
                ? static_cast<Real>(rule.std *
                                    random::normal(key, static_cast<uint64_t>(whole_offset + in_param)))
                : static_cast<Real>(rule.constant);
      }
    });
  }
}

template void init_gpt2_params<float>(const GPTConfig&, const ParamTable&, uint64_t, int64_t, int64_t,
                                      float*);
template void init_gpt2_params<double>(const GPTConfig&, const ParamTable&, uint64_t, int64_t, int64_t,
                                       double*);

}  // namespace gpt
