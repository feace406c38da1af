// Dropout's mask bits, written once for host and device: whether element `counter` of the sequence keyed by
// `key` is kept, and the scale of the kept values. The CPU kernels (kernels/cpu) and the CUDA kernels
// (kernels/cuda) both call these, so the same seed, window, layer, site and element give the same mask on
// either backend.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/common/random.h"

namespace gpt::dropout {

// The keep rule as an integer compare: random::uniform32(key, e) >= p exactly when (bits(key, e) >> 40) >=
// ceil(p * 2^24). p >= 1 gives 2^24 and above, which no 24-bit draw reaches; p <= 0 gives 0 (keep all).
// Computed on the host, once per op (the ceil of a double is exact here: p * 2^24 only shifts the exponent).
inline uint64_t threshold(double p) {
  return p <= 0 ? 0 : static_cast<uint64_t>(std::ceil((p < 1.0 ? p : 1.0) * 0x1.0p24));
}

// Inverted dropout's scale of the kept values, 1/(1-p) rounded once to Real; 0 for p >= 1 (nothing kept).
template <typename Real>
inline Real scale(double p) {
  return p >= 1 ? Real(0) : static_cast<Real>(1.0 / (1.0 - p));
}

// Whether element `counter` under `key` survives, for the threshold of threshold(p).
GPT_RANDOM_HD inline bool keeps(uint64_t key, uint64_t counter, uint64_t threshold) {
  return (random::bits(key, counter) >> 40) >= threshold;
}

}  // namespace gpt::dropout
