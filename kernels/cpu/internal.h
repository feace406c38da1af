// Internal helpers of the CPU kernels: Eigen views over raw row-major buffers, the split of a range among
// OpenMP threads, dropout's mask loop, and vectorized math whose result for each element does not depend on
// the buffer's address or on the thread count (Eigen's array expressions peel an unaligned head onto a scalar
// path that rounds differently, and a vectorized reduction's order can follow the alignment, so we avoid
// both).
#pragma once

#include <omp.h>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/common/dropout_bits.h"
#include "kernels/common/random.h"

namespace gpt::cpu::detail {

template <typename Real>
using RowMat = Eigen::Matrix<Real, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// A [rows, cols] row-major view with rows `stride` elements apart (heads inside the fused [B,T,3C] qkv).
template <typename Real>
using MatMap = Eigen::Map<RowMat<Real>, Eigen::Unaligned, Eigen::OuterStride<>>;
template <typename Real>
using ConstMatMap = Eigen::Map<const RowMat<Real>, Eigen::Unaligned, Eigen::OuterStride<>>;

template <typename Real>
MatMap<Real> mat(Real* p, int64_t rows, int64_t cols, int64_t stride) {
  return MatMap<Real>(p, rows, cols, Eigen::OuterStride<>(stride));
}
template <typename Real>
ConstMatMap<Real> mat(const Real* p, int64_t rows, int64_t cols, int64_t stride) {
  return ConstMatMap<Real>(p, rows, cols, Eigen::OuterStride<>(stride));
}

// The part [begin, end) of [0, n) owned by the calling thread inside an OpenMP parallel region. Boundaries
// are multiples of 16 elements so that threads do not share cache lines and inner loops stay whole vectors.
struct Range {
  int64_t begin, end;
};
// The same split for thread `id` of `threads`, outside a region (linear_forward_columns retraces the cuts).
inline Range thread_range(int64_t n, int64_t threads, int64_t id) {
  const int64_t blocks = (n + 15) / 16;
  const int64_t per = (blocks + threads - 1) / threads;
  return {std::min(n, id * per * 16), std::min(n, (id + 1) * per * 16)};
}
inline Range thread_range(int64_t n) {
  return thread_range(n, omp_get_num_threads(), omp_get_thread_num());
}

// sum_{i<n} term(i), with element i always added into lane i % 16 and the lanes combined in a fixed order:
// the compiler vectorizes the lane loop, and the result is the same for any alignment.
template <typename Real, typename Term>
inline Real lane_sum(int64_t n, Term term) {
  constexpr int kLanes = 16;
  Real acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
#pragma omp simd
    for (int l = 0; l < kLanes; ++l) acc[l] += term(i + l);
  }
  for (int l = 0; i + l < n; ++l) acc[l] += term(i + l);
  for (int w = kLanes / 2; w > 0; w /= 2)
    for (int l = 0; l < w; ++l) acc[l] += acc[l + w];
  return acc[0];
}

// max_{i<n} x[i] (n >= 1), written as lane-wise compares the compiler turns into vector max instructions
// (a plain std::max reduction stays scalar without -ffast-math: 4x slower over a 50257-wide logits row).
template <typename Real>
inline Real lane_max(const Real* x, int64_t n) {
  constexpr int kLanes = 16;
  Real acc[kLanes];
  std::fill(acc, acc + kLanes, x[0]);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
#pragma omp simd
    for (int l = 0; l < kLanes; ++l) acc[l] = x[i + l] > acc[l] ? x[i + l] : acc[l];
  }
  for (int l = 0; i + l < n; ++l) acc[l] = x[i + l] > acc[l] ? x[i + l] : acc[l];
  for (int l = 1; l < kLanes; ++l) acc[0] = acc[l] > acc[0] ? acc[l] : acc[0];
  return acc[0];
}

// y[j] = keep(key, counter0 + j) ? x[j] * scale : 0 for j < n; y may be x. The loop vectorizes (64-bit
// multiplies of the generator included, with AVX-512DQ).
template <typename Real>
inline void dropout_span(Real* y, const Real* x, uint64_t key, uint64_t counter0, int64_t n,
                         uint64_t threshold, Real scale) {
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) {
    const bool keep = dropout::keeps(key, counter0 + uint64_t(j), threshold);
    y[j] = keep ? x[j] * scale : Real(0);
  }
}

// Eigen's SIMD packet of Real (16 floats / 8 doubles with AVX-512) and its width.
template <typename Real>
using Packet = typename Eigen::internal::packet_traits<Real>::type;
template <typename Real>
inline constexpr int kPacket = Eigen::internal::unpacket_traits<Packet<Real>>::size;

// y[i] = exp(x[i] - shift) for i < n, returning the sum of the y. Every element, a short tail included, goes
// through Eigen's vectorized exp (accurate to about an ulp, in the precision of Real); y may alias x.
// The packet's lanes sum blocks of kExpSumBlock packets, and the blocks' sums are added into a second packet:
// one chain of 50257 / 8 float additions per lane (a GPT-2 logits row with AVX2) put 1.5e-5 of relative
// error into the softmax's probabilities (7.5e-6 with AVX-512's 16 lanes), where chains of at most 256 give
// 1.1e-6 (6.5e-7) over 1024 rows of N(0, 9) logits (tests/kernels:forward_test; the GPU check found it).
// A row of at most one block (every attention row up to T = 2048, and small vocabularies) sums as before, bit
// for bit: its block's sum is added to zero.
inline constexpr int64_t kExpSumBlock = 256;
template <typename Real>
Real exp_shifted_sum(Real* y, const Real* x, Real shift, int64_t n) {
  namespace ei = Eigen::internal;
  using P = Packet<Real>;
  constexpr int W = kPacket<Real>;
  const P s = ei::pset1<P>(shift);
  P total = ei::pset1<P>(Real(0)), acc = total;
  int64_t i = 0;
  for (int64_t packets = 0; i + W <= n; i += W) {
    const P e = ei::pexp(ei::psub(ei::ploadu<P>(x + i), s));
    ei::pstoreu(y + i, e);
    acc = ei::padd(acc, e);
    if (++packets == kExpSumBlock && i + 2 * W <= n) {  // a block ends and another follows
      total = ei::padd(total, acc);
      acc = ei::pset1<P>(Real(0));
      packets = 0;
    }
  }
  if (i < n) {  // pad the tail with -inf, whose exp adds 0 to the sum
    Real buf[W];
    std::fill(buf, buf + W, -std::numeric_limits<Real>::infinity());
    std::copy(x + i, x + n, buf);
    const P e = ei::pexp(ei::psub(ei::ploadu<P>(buf), s));
    acc = ei::padd(acc, e);
    ei::pstoreu(buf, e);
    std::copy(buf, buf + (n - i), y + i);
  }
  return ei::predux(ei::padd(total, acc));
}

// y[i] = tanh(x[i]) for i < n, vectorized where Eigen has a packet tanh (float); std::tanh otherwise (double,
// used only for gradient checks).
template <typename Real>
void tanh_array(Real* y, const Real* x, int64_t n) {
  namespace ei = Eigen::internal;
  using P = Packet<Real>;
  constexpr int W = kPacket<Real>;
  if constexpr (W > 1 && ei::packet_traits<Real>::HasTanh) {
    int64_t i = 0;
    for (; i + W <= n; i += W) ei::pstoreu(y + i, ei::ptanh(ei::ploadu<P>(x + i)));
    if (i < n) {
      Real buf[W] = {};
      std::copy(x + i, x + n, buf);
      ei::pstoreu(buf, ei::ptanh(ei::ploadu<P>(buf)));
      std::copy(buf, buf + (n - i), y + i);
    }
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = std::tanh(x[i]);
  }
}

}  // namespace gpt::cpu::detail
