// GPT-2 initialization: matrices and embeddings N(0, 0.02), the two residual output projections of each block
// N(0, 0.02/sqrt(2L)), biases 0, LayerNorm weights 1, padded vocabulary rows 0. Every element is a pure
// function of (seed, flat index), so a rank can initialize just its own shard and get the same numbers.
#pragma once

#include <cstdint>

#include "model/config.h"
#include "model/params.h"

namespace gpt {

// Writes elements [begin, end) of the flat parameter vector into out[0 .. end-begin).
template <typename Real>
void init_gpt2_params(const GPTConfig& config, const ParamTable& table, uint64_t seed, int64_t begin,
                      int64_t end, Real* out);

}  // namespace gpt
