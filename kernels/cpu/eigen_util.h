// Internal helpers of the CPU kernels: Eigen views over raw row-major buffers, and the split of a range of
// columns among OpenMP threads (used where a per-column reduction must be race-free and deterministic).
#pragma once

#include <omp.h>

#include <Eigen/Core>
#include <algorithm>
#include <cstdint>

namespace gpt::cpu::detail {

template <typename Real>
using RowMat = Eigen::Matrix<Real, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename Real>
using Vec = Eigen::Array<Real, Eigen::Dynamic, 1>;

// A dense [rows, cols] row-major view; with an outer stride when rows are farther apart than cols
// (heads inside the fused [B,T,3C] qkv activation).
template <typename Real>
using MatMap = Eigen::Map<RowMat<Real>, Eigen::Unaligned, Eigen::OuterStride<>>;
template <typename Real>
using ConstMatMap = Eigen::Map<const RowMat<Real>, Eigen::Unaligned, Eigen::OuterStride<>>;
template <typename Real>
using ArrMap = Eigen::Map<Vec<Real>>;
template <typename Real>
using ConstArrMap = Eigen::Map<const Vec<Real>>;

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
inline Range thread_range(int64_t n) {
  const int64_t threads = omp_get_num_threads(), id = omp_get_thread_num();
  const int64_t blocks = (n + 15) / 16;
  const int64_t per = (blocks + threads - 1) / threads;
  return {std::min(n, id * per * 16), std::min(n, (id + 1) * per * 16)};
}

}  // namespace gpt::cpu::detail
