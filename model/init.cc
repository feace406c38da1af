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

}  // namespace

template <typename Real>
void init_gpt2_params(const GPTConfig& config, const ParamTable& table, uint64_t seed, int64_t begin,
                      int64_t end, Real* out) {
  const uint64_t key =
      random::derive_key(seed, 0x6770743269ULL);  // "gpt2i": separates init from other streams
  const double residual_std = 0.02 / std::sqrt(2.0 * config.num_layers);
  for (const ParamInfo& p : table.params) {
    const int64_t lo = std::max(begin, p.offset), hi = std::min(end, p.offset + p.numel);
    if (lo >= hi) continue;
    Real* dst = out + (lo - begin);
    if (ends_with(p.name, ".bias")) {
      std::fill(dst, dst + (hi - lo), Real(0));
      continue;
    }
    if (ends_with(p.name, "ln_1.weight") || ends_with(p.name, "ln_2.weight") || p.name == "ln_f.weight") {
      std::fill(dst, dst + (hi - lo), Real(1));
      continue;
    }
    const double std = ends_with(p.name, "attn.c_proj.weight") || ends_with(p.name, "mlp.c_proj.weight")
                           ? residual_std
                           : 0.02;
    // wte rows at and beyond V are the padding: zero, and they stay zero through training.
    const int64_t real_end =
        p.name == "wte" ? p.offset + int64_t(config.vocab) * config.hidden : p.offset + p.numel;
    for (int64_t i = lo; i < hi; ++i) {
      dst[i - lo] =
          i < real_end ? static_cast<Real>(std * random::normal(key, static_cast<uint64_t>(i))) : Real(0);
    }
  }
}

template void init_gpt2_params<float>(const GPTConfig&, const ParamTable&, uint64_t, int64_t, int64_t,
                                      float*);
template void init_gpt2_params<double>(const GPTConfig&, const ParamTable&, uint64_t, int64_t, int64_t,
                                       double*);

}  // namespace gpt
