// AdamW over any range of the flat parameter vector: the full vector in a single process, or one rank's
// shard under ZeRO. The parameter table says which elements get weight decay (matrices and embeddings) and
// which do not (biases, LayerNorm).
#pragma once

#include <cstdint>

#include "kernels/ops.h"
#include "model/params.h"

namespace gpt {

// The four arrays of the update, on the ops' device; index `at` of each holds flat element `begin`. compute,
// when not empty, is where the updated parameters round into (the compute weights, in the same layout),
// written in the update's own pass (Ops::adamw_with_copy).
struct AdamWState {
  Tensor param, grad, m, v;
  Tensor compute = {};
};

// Updates flat elements [begin, end), held from index `at` of each array of `state`, through ops. step is the
// 1-based count of applied updates; grad_scale multiplies every gradient (unscale, clip).
void adamw_step_range(Ops& ops, const ParamTable& table, int64_t begin, int64_t end, const AdamWState& state,
                      int64_t at, const AdamWHyper& hyper, int64_t step, float grad_scale);

// The same on host arrays with the CPU backend (the single-process trainers).
void adamw_step_range(const ParamTable& table, int64_t begin, int64_t end, float* param, const float* grad,
                      float* m, float* v, const AdamWHyper& hyper, int64_t step, float grad_scale);

}  // namespace gpt
