// Token + position embedding (forward and backward), CPU, templated over the scalar type; the whole table or
// a slice of its rows [first, first + rows) (vocabulary parallelism: tokens outside the slice add nothing).
//   forward:  out[b,t,:] = wte[tok[b,t] - first,:] (or 0) + wpe[t,:]
//   backward: dwte[tok[b,t] - first,:] += dout[b,t,:];  dwpe[t,:] += sum_b dout[b,t,:]
#include "kernels/cpu/embedding.h"

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/internal.h"

namespace gpt::cpu {
namespace {

// The whole table's "slice": every valid token id.
constexpr int64_t kAllRows = INT32_MAX;

bool in_slice(int32_t token, int64_t first, int64_t rows) {
  return token >= first && token < first + rows;
}

}  // namespace

template <typename Real>
void embedding_forward_rows(Real* out, const int32_t* tokens, const Real* wte, int64_t first, int64_t rows,
                            const Real* wpe, int B, int T, int C) {
#pragma omp parallel for schedule(static)
  for (int64_t bt = 0; bt < int64_t(B) * T; ++bt) {
    Real* o = out + bt * C;
    const bool held = in_slice(tokens[bt], first, rows);
    const Real* w = held ? wte + (tokens[bt] - first) * C : nullptr;
    const Real* p = wpe ? wpe + (bt % T) * C : nullptr;
    if (w && p) {
#pragma omp simd
      for (int c = 0; c < C; ++c) o[c] = w[c] + p[c];
    } else if (w || p) {
      std::copy(w ? w : p, (w ? w : p) + C, o);  // x + 0 is x: the sum over the slices keeps its bits
    } else {
      std::fill(o, o + C, Real(0));
    }
  }
}

// Repeated tokens scatter into the same dwte row, so threads split the channels, not the tokens: each thread
// walks every (b,t) over its own columns. That is race-free and sums in the same order for any thread count.
template <typename Real>
void embedding_backward_rows(Real* dwte, int64_t first, int64_t rows, Real* dwpe, const Real* dout,
                             const int32_t* tokens, int B, int T, int C) {
#pragma omp parallel
  {
    const detail::Range r = detail::thread_range(C);
    for (int64_t bt = 0; bt < int64_t(B) * T; ++bt) {
      const Real* d = dout + bt * C;
      if (dwte && in_slice(tokens[bt], first, rows)) {
        Real* w = dwte + (tokens[bt] - first) * C;
#pragma omp simd
        for (int64_t c = r.begin; c < r.end; ++c) w[c] += d[c];
      }
      if (dwpe) {
        Real* p = dwpe + (bt % T) * C;
#pragma omp simd
        for (int64_t c = r.begin; c < r.end; ++c) p[c] += d[c];
      }
    }
  }
}

template <typename Real>
void embedding_forward(Real* out, const int32_t* tokens, const Real* wte, const Real* wpe, int B, int T,
                       int C) {
  embedding_forward_rows(out, tokens, wte, 0, kAllRows, wpe, B, T, C);
}

template <typename Real>
void embedding_backward(Real* dwte, Real* dwpe, const Real* dout, const int32_t* tokens, int B, int T,
                        int C) {
  embedding_backward_rows(dwte, 0, kAllRows, dwpe, dout, tokens, B, T, C);
}

template void embedding_forward<float>(float*, const int32_t*, const float*, const float*, int, int, int);
template void embedding_forward<double>(double*, const int32_t*, const double*, const double*, int, int, int);
template void embedding_backward<float>(float*, float*, const float*, const int32_t*, int, int, int);
template void embedding_backward<double>(double*, double*, const double*, const int32_t*, int, int, int);
template void embedding_forward_rows<float>(float*, const int32_t*, const float*, int64_t, int64_t,
                                            const float*, int, int, int);
template void embedding_forward_rows<double>(double*, const int32_t*, const double*, int64_t, int64_t,
                                             const double*, int, int, int);
template void embedding_backward_rows<float>(float*, int64_t, int64_t, float*, const float*, const int32_t*,
                                             int, int, int);
template void embedding_backward_rows<double>(double*, int64_t, int64_t, double*, const double*,
                                              const int32_t*, int, int, int);

}  // namespace gpt::cpu
