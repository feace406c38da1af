// Counter-based random numbers: a value is a pure function of (key, counter), so any rank, thread or
// recomputation that asks for element i gets the same number. Used for weight initialization (each element
// keyed by its flat index, independent of how parameters are partitioned) and, later, dropout masks keyed by
// (seed, window, layer, site, element). Written for host and device alike.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define GPT_RANDOM_HD __host__ __device__
#else
#define GPT_RANDOM_HD
#endif

namespace gpt::random {

// SplitMix64's finalizer: a bijective 64-bit mix with good avalanche.
GPT_RANDOM_HD inline uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// Combine a key with more fields (layer, site, ...) into a new key.
GPT_RANDOM_HD inline uint64_t derive_key(uint64_t key, uint64_t field) {
  return mix64(key ^ mix64(field));
}

GPT_RANDOM_HD inline uint64_t bits(uint64_t key, uint64_t counter) {
  return mix64(key ^ mix64(counter + 0x632BE59BD9B4E019ULL));
}

// Uniform in [0, 1) with 53 random bits.
GPT_RANDOM_HD inline double uniform(uint64_t key, uint64_t counter) {
  return static_cast<double>(bits(key, counter) >> 11) * 0x1.0p-53;
}

// Uniform in [0, 1) with 24 random bits, exact as a float: the draw of the dropout masks. uniform32(k, c) >=
// p exactly when (bits(k, c) >> 40) >= ceil(p * 2^24), which lets the mask loops compare integers.
GPT_RANDOM_HD inline float uniform32(uint64_t key, uint64_t counter) {
  return static_cast<float>(bits(key, counter) >> 40) * 0x1.0p-24f;
}

// Standard normal by Box-Muller over two uniforms drawn at counters 2i and 2i+1.
GPT_RANDOM_HD inline double normal(uint64_t key, uint64_t index) {
  const double u1 = 1.0 - uniform(key, 2 * index);  // (0, 1]: log is finite
  const double u2 = uniform(key, 2 * index + 1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

}  // namespace gpt::random
