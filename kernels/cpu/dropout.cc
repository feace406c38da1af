// Dropout forward and backward, CPU: both apply y = mask * x / (1-p) with the mask regenerated from the
// counter-based generator (see dropout.h). Threads split each sequence's elements; every element's result is
// a function of (key, e, x) alone, so the thread count cannot change it.
#include "kernels/cpu/dropout.h"

#include <algorithm>

#include "kernels/cpu/internal.h"

namespace gpt::cpu {

bool dropout_keep(uint64_t key, int64_t e, double p) {
  return p <= 0 || dropout::keeps(key, uint64_t(e), dropout::threshold(p));
}

template <typename Real>
void dropout_forward(Real* out, const Real* inp, const uint64_t* keys, double p, int B, int64_t n,
                     int64_t offset) {
  if (p <= 0) {
    if (out != inp) std::copy(inp, inp + int64_t(B) * n, out);
    return;
  }
  const uint64_t threshold = dropout::threshold(p);
  const Real scale = dropout::scale<Real>(p);
#pragma omp parallel
  {
    const detail::Range r = detail::thread_range(n);
    for (int b = 0; b < B; ++b) {
      const int64_t off = int64_t(b) * n + r.begin;
      detail::dropout_span(out + off, inp + off, keys[b], uint64_t(offset + r.begin), r.end - r.begin,
                           threshold, scale);
    }
  }
}

template <typename Real>
void dropout_backward(Real* dinp, const Real* dout, const uint64_t* keys, double p, int B, int64_t n,
                      int64_t offset) {
  dropout_forward(dinp, dout, keys, p, B, n, offset);
}

template void dropout_forward<float>(float*, const float*, const uint64_t*, double, int, int64_t, int64_t);
template void dropout_forward<double>(double*, const double*, const uint64_t*, double, int, int64_t, int64_t);
template void dropout_backward<float>(float*, const float*, const uint64_t*, double, int, int64_t, int64_t);
template void dropout_backward<double>(double*, const double*, const uint64_t*, double, int, int64_t,
                                       int64_t);

}  // namespace gpt::cpu
