// Token + position embedding (forward and backward), CPU, templated over the scalar type.
//   forward:  out[b,t,:] = wte[tok[b,t],:] + wpe[t,:]
//   backward: dwte[tok[b,t],:] += dout[b,t,:];  dwpe[t,:] += sum_b dout[b,t,:]
#include "kernels/cpu/embedding.h"

#include "kernels/cpu/internal.h"

namespace gpt::cpu {

template <typename Real>
void embedding_forward(Real* out, const int32_t* tokens, const Real* wte, const Real* wpe, int B, int T,
                       int C) {
#pragma omp parallel for schedule(static)
  for (int64_t bt = 0; bt < int64_t(B) * T; ++bt) {
    const Real* w = wte + int64_t(tokens[bt]) * C;
    const Real* p = wpe + (bt % T) * C;
    Real* o = out + bt * C;
#pragma omp simd
    for (int c = 0; c < C; ++c) o[c] = w[c] + p[c];
  }
}

// Repeated tokens scatter into the same dwte row, so threads split the channels, not the tokens: each thread
// walks every (b,t) over its own columns. That is race-free and sums in the same order for any thread count.
template <typename Real>
void embedding_backward(Real* dwte, Real* dwpe, const Real* dout, const int32_t* tokens, int B, int T,
                        int C) {
#pragma omp parallel
  {
    const detail::Range r = detail::thread_range(C);
    for (int64_t bt = 0; bt < int64_t(B) * T; ++bt) {
      const Real* d = dout + bt * C;
      if (dwte) {
        Real* w = dwte + int64_t(tokens[bt]) * C;
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

template void embedding_forward<float>(float*, const int32_t*, const float*, const float*, int, int, int);
template void embedding_forward<double>(double*, const int32_t*, const double*, const double*, int, int, int);
template void embedding_backward<float>(float*, float*, const float*, const int32_t*, int, int, int);
template void embedding_backward<double>(double*, double*, const double*, const int32_t*, int, int, int);

}  // namespace gpt::cpu
