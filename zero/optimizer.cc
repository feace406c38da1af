// AdamW over ranges of the flat parameter vector, with per-parameter weight decay; see optimizer.h.
#include "zero/optimizer.h"

#include <algorithm>
#include <vector>

namespace gpt {

void adamw_step_range(const ParamTable& table, int64_t begin, int64_t end, float* param, const float* grad,
                      float* m, float* v, const cpu::AdamWHyper& hyper, int64_t step, float grad_scale) {
  cpu::AdamWHyper no_decay = hyper;
  no_decay.weight_decay = 0.0;
  for (const ParamInfo& p : table.params) {
    const int64_t lo = std::max(begin, p.offset), hi = std::min(end, p.offset + p.numel);
    if (lo >= hi) continue;
    const int64_t at = lo - begin;
    cpu::adamw_update(param + at, grad + at, m + at, v + at, hi - lo, p.weight_decay ? hyper : no_decay, step,
                      grad_scale);
  }
}

double sum_of_squares(const float* x, int64_t n) {
  // Fixed-size chunks summed in a fixed order: the result does not depend on the thread count.
  constexpr int64_t kChunk = 1 << 14;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(chunks, 0.0);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    double sum = 0;
    for (int64_t i = c * kChunk; i < std::min(n, (c + 1) * kChunk); ++i) sum += double(x[i]) * double(x[i]);
    partial[c] = sum;
  }
  double total = 0;
  for (double p : partial) total += p;
  return total;
}

}  // namespace gpt
