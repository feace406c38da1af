// AdamW over any range of the flat parameter vector: the full vector in a single process, or one rank's
// shard under ZeRO. The parameter table says which elements get weight decay (matrices and embeddings) and
// which do not (biases, LayerNorm).
#pragma once

#include <cstdint>

#include "kernels/cpu/adamw.h"
#include "model/params.h"

namespace gpt {

// Updates flat elements [begin, end) held in param/grad/m/v (index 0 there is flat element begin).
// step is the 1-based count of applied updates; grad_scale multiplies every gradient (unscale, clip).
void adamw_step_range(const ParamTable& table, int64_t begin, int64_t end, float* param, const float* grad,
                      float* m, float* v, const cpu::AdamWHyper& hyper, int64_t step, float grad_scale);

// Sum of squares of n values, accumulated in double (for the global gradient norm).
double sum_of_squares(const float* x, int64_t n);

}  // namespace gpt
