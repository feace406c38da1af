// AdamW over ranges of the flat parameter vector, with per-parameter weight decay; see optimizer.h.
#include "zero/optimizer.h"

#include <algorithm>

#include "kernels/cpu/cpu_ops.h"

namespace gpt {
namespace {

Tensor slice(const Tensor& t, int64_t at, int64_t n) {
  return Tensor{static_cast<uint8_t*>(t.data) + dtype_bytes(t.dtype, at), {n}, t.dtype, t.device};
}

}  // namespace

void adamw_step_range(Ops& ops, const ParamTable& table, int64_t begin, int64_t end, const AdamWState& state,
                      int64_t at, const AdamWHyper& hyper, int64_t step, float grad_scale) {
  AdamWHyper no_decay = hyper;
  no_decay.weight_decay = 0.0;
  for (const ParamInfo& p : table.params) {
    const int64_t lo = std::max(begin, p.offset), hi = std::min(end, p.offset + p.numel);
    if (lo >= hi) continue;
    const int64_t i = at + lo - begin, n = hi - lo;
    const AdamWHyper& h = p.weight_decay ? hyper : no_decay;
    const Tensor param = slice(state.param, i, n), grad = slice(state.grad, i, n);
    if (state.compute.empty()) {
      ops.adamw(param, grad, slice(state.m, i, n), slice(state.v, i, n), h, step, grad_scale);
    } else {
      ops.adamw_with_copy(param, grad, slice(state.m, i, n), slice(state.v, i, n), h, step, grad_scale,
                          slice(state.compute, i, n));
    }
  }
}

void adamw_step_range(const ParamTable& table, int64_t begin, int64_t end, float* param, const float* grad,
                      float* m, float* v, const AdamWHyper& hyper, int64_t step, float grad_scale) {
  auto host = [&](const float* data) {
    return Tensor{const_cast<float*>(data), {end - begin}, DType::kF32, Device::kCPU};
  };
  adamw_step_range(cpu_ops(), table, begin, end, {host(param), host(grad), host(m), host(v)}, 0, hyper, step,
                   grad_scale);
}

}  // namespace gpt
