// Fully connected layer (forward and backward) as Eigen GEMMs over row-major buffers, CPU.
//   forward:  Y[N,OC] = X[N,C] W[OC,C]^T + b
//   backward: dX += dY W;  dW += dY^T X;  db += sum_n dY[n,:]
// Products are written with noalias() and += so Eigen accumulates straight into the destination (beta = 1)
// instead of building a temporary. Threads split the output columns (or dW's rows) and each runs a serial
// Eigen GEMM on its slice: measured faster than Eigen's own OpenMP split here (the 256 x 768 x 50304 LM head
// forward: 250 vs 160 GFLOP/s on 2 threads), and the result does not depend on the thread count.
#include "kernels/cpu/linear.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/internal.h"

namespace gpt::cpu {

using detail::mat;

template <typename Real>
void linear_forward(Real* out, const Real* inp, const Real* weight, const Real* bias, int N, int C, int OC) {
  const auto x = mat(inp, N, C, C);
#pragma omp parallel
  {
    // Thread i computes the output columns [o0, o1): Y[:, o0:o1] = X W[o0:o1, :]^T (+ b[o0:o1]).
    const detail::Range r = detail::thread_range(OC);
    if (r.end > r.begin) {
      const int64_t cols = r.end - r.begin;
      auto y = mat(out + r.begin, N, cols, OC);
      const auto w = mat(weight + r.begin * C, cols, C, C);
      if (bias) {
        // Start from the bias and let the GEMM accumulate onto it: one pass over Y instead of two.
        for (int n = 0; n < N; ++n) std::copy(bias + r.begin, bias + r.end, out + int64_t(n) * OC + r.begin);
        y.noalias() += x * w.transpose();
      } else {
        y.noalias() = x * w.transpose();
      }
    }
  }
}

template <typename Real>
void linear_backward(Real* dinp, Real* dweight, Real* dbias, const Real* dout, const Real* inp,
                     const Real* weight, int N, int C, int OC) {
  // The whole layer is its one tile: the same loops, with dout's row stride equal to the width.
  linear_backward_columns(dinp, dweight, dbias, dout, inp, weight, N, C, OC, 0, OC);
}

// ---- Memory-centric tiling: one tile of output columns, bit for bit as linear_forward computes them ----
//
// Eigen's GEMM (GeneralBlockPanelKernel.h) computes Y^T = W X^T, the output columns of one call being the
// rows of its left-hand side, and runs those rows through micro-kernels by blocks: of 3 packets (P columns
// each: 8 floats or 4 doubles with AVX2), then 2, then 1, then fractions of a packet and scalars. The 3P and
// 2P kernels add the products over k in order into one accumulator ("sequential" columns); the 1-packet
// kernel keeps even and odd k in two accumulators, so the same column rounds differently there. Its m
// blocking is a multiple of 3P, so in a call of width w exactly the first R(w) = 3P floor(w / 3P) (+ 2P when
// w mod 3P >= 2P) columns are sequential, and the remaining w - R(w) < 2P (the tail) go through the other
// kernels, starting at a packet boundary. Measured (Eigen 3.4, AVX2, float and double, N from 1 to 100, C
// from 32 to 1600, widths up to 1300): every sequential column has the same bits in any call; a tail of width
// >= 3 has the same bits in a call over exactly the tail; a tail of width 1 or 2 does not (a call that narrow
// takes Eigen's matrix-vector or small-product paths) but does in a call of 3P sequential columns plus the
// tail. The k blocking depends only on k = C, the same for every call here.
//
// linear_forward_columns therefore walks linear_forward's thread slices and, for each slice's part inside
// the tile, computes its sequential columns with calls whose widths are all sequential (a part too narrow for
// that is computed in a wider window into scratch, keeping only its columns) and its tail with a call over
// exactly the tail.
namespace {

// The tile [first, first + W) must lie inside the layer's OC outputs.
void check_columns(const char* op, int OC, int first, int W) {
  if (first < 0 || W < 0 || first + int64_t(W) > OC)
    throw std::invalid_argument(std::string(op) + ": columns [" + std::to_string(first) + ", " +
                                std::to_string(first + int64_t(W)) + ") outside the layer's " +
                                std::to_string(OC) + " outputs");
}

// The number of threads the next parallel region will have, as linear_forward's region sees it.
int team_size() {
  int threads = 1;
#pragma omp parallel
  {
#pragma omp single
    threads = omp_get_num_threads();
  }
  return threads;
}

// One Eigen GEMM over the output columns [begin, begin + width), of which [keep_begin, keep_end) go to out.
// A call that keeps fewer columns than it computes (a window) computes into scratch.
struct ColumnCall {
  int64_t begin, width, keep_begin, keep_end;
  bool window() const { return keep_begin != begin || keep_end != begin + width; }
};

// Plans the calls that give each column of the tile [first, end) the micro-kernel linear_forward gave it.
class ColumnPlan {
 public:
  ColumnPlan(int64_t packet, int64_t first, int64_t end, int64_t chunk, std::string shapes)
      : p_(packet), first_(first), end_(end), chunk_(chunk), shapes_(std::move(shapes)) {}

  // Adds the calls for the tile's part of linear_forward's thread slice [s0, s1).
  void add_slice(int64_t s0, int64_t s1) {
    // linear_forward's call over the slice runs its first R(w) columns in the sequential kernels, [tail, s1)
    // in the others.
    const int64_t w = s1 - s0, r = w % (3 * p_);
    const int64_t tail = s0 + w - r + (r >= 2 * p_ ? 2 * p_ : 0);
    if (std::max(s0, first_) < std::min(tail, end_))
      add_sequential(std::max(s0, first_), std::min(tail, end_));
    if (tail == s1 || s1 <= first_ || tail >= end_) return;
    if (tail < first_ || s1 > end_)
      fail("the tile's boundary cuts Eigen's tail [" + std::to_string(tail) + ", " + std::to_string(s1) +
           ") of linear_forward's thread slice [" + std::to_string(s0) + ", " + std::to_string(s1) + ")");
    if (tail == s0 || s1 - tail >= 3) {
      calls_.push_back({tail, s1 - tail, tail, s1});
    } else {  // too narrow to call alone: after 3P sequential columns, as in a wider call
      if (tail - 3 * p_ < first_)
        fail("a tail of " + std::to_string(s1 - tail) + " columns at " + std::to_string(tail) +
             " needs 3 packets of columns before it in the tile");
      calls_.push_back({tail - 3 * p_, s1 - tail + 3 * p_, tail, s1});
    }
  }

  const std::vector<ColumnCall>& calls() const { return calls_; }

 private:
  // Columns [a, b) that linear_forward computed in the sequential kernels.
  void add_sequential(int64_t a, int64_t b) {
    const int64_t p3 = 3 * p_;
    for (; b - a >= chunk_ + p3; a += chunk_) calls_.push_back({a, chunk_, a, a + chunk_});
    const int64_t w = b - a, whole = w - w % p3, r = w % p3;
    if (r == 0 || r == 2 * p_) {
      calls_.push_back({a, w, a, b});
    } else if (r == p_ && whole > 0) {  // 3P q + P = 3P (q - 1) + 2P + 2P
      if (whole > p3) calls_.push_back({a, whole - p3, a, b - 4 * p_});
      calls_.push_back({b - 4 * p_, 2 * p_, b - 4 * p_, b - 2 * p_});
      calls_.push_back({b - 2 * p_, 2 * p_, b - 2 * p_, b});
    } else {
      if (whole > 0) calls_.push_back({a, whole, a, a + whole});
      add_window(a + whole, b, r <= 2 * p_ ? 2 * p_ : p3);
    }
  }

  // Sequential columns [a, b), fewer than `width`, computed in an all-sequential call `width` wide.
  void add_window(int64_t a, int64_t b, int64_t width) {
    if (a + width <= end_) {
      calls_.push_back({a, width, a, b});
    } else if (b - width >= first_) {
      calls_.push_back({b - width, width, a, b});
    } else {
      fail("columns [" + std::to_string(a) + ", " + std::to_string(b) + ") need a window of " +
           std::to_string(width) + " columns inside the tile");
    }
  }

  [[noreturn]] void fail(const std::string& why) const {
    throw std::invalid_argument(
        "linear_forward_columns: " + shapes_ + ": " + why +
        ", so its columns cannot match linear_forward bit for bit; use tile boundaries that are multiples of "
        "16 (with OC a multiple of 16) and tiles at least " +
        std::to_string(2 * p_) + " wide");
  }

  const int64_t p_, first_, end_, chunk_;
  const std::string shapes_;
  std::vector<ColumnCall> calls_;
};

// Runs one planned call: out columns [call.keep_begin, call.keep_end) = X W^T (+ b) over the call's columns,
// with the same Eigen expressions as linear_forward (bias first, then the product added onto it).
template <typename Real>
void run_column_call(const ColumnCall& call, Real* out, const Real* inp, const Real* weight, const Real* bias,
                     int N, int C, int OC, int first, std::vector<Real>& scratch) {
  const auto x = mat(inp, N, C, C);
  const int64_t local = call.begin - first, cols = call.width;
  Real* dst = out + call.begin;
  int64_t ld = OC;
  if (call.window()) {
    scratch.resize(size_t(N) * cols);
    dst = scratch.data();
    ld = cols;
  }
  auto y = mat(dst, N, cols, ld);
  const auto w = mat(weight + local * C, cols, C, C);
  if (bias) {
    for (int n = 0; n < N; ++n) std::copy(bias + local, bias + local + cols, dst + int64_t(n) * ld);
    y.noalias() += x * w.transpose();
  } else {
    y.noalias() = x * w.transpose();
  }
  if (call.window()) {
    for (int n = 0; n < N; ++n) {
      const Real* row = dst + int64_t(n) * ld + (call.keep_begin - call.begin);
      std::copy(row, row + (call.keep_end - call.keep_begin), out + int64_t(n) * OC + call.keep_begin);
    }
  }
}

}  // namespace

template <typename Real>
void linear_forward_columns(Real* out, const Real* inp, const Real* weight, const Real* bias, int N, int C,
                            int OC, int first, int W) {
  check_columns("linear_forward_columns", OC, first, W);
  if (W == 0 || N == 0) return;
  const int threads = team_size();
  constexpr int64_t P = detail::kPacket<Real>;
  // Long sequential runs are split into chunks (multiples of 3P, so still sequential) about a thread's share.
  const int64_t chunk = std::max<int64_t>(1, (W + threads * 3 * P - 1) / (threads * 3 * P)) * 3 * P;
  ColumnPlan plan(P, first, first + W, chunk,
                  "columns [" + std::to_string(first) + ", " + std::to_string(first + W) +
                      ") of N=" + std::to_string(N) + " C=" + std::to_string(C) +
                      " OC=" + std::to_string(OC) + " on " + std::to_string(threads) + " threads");
  for (int id = 0; id < threads; ++id) {
    const detail::Range slice = detail::thread_range(OC, threads, id);
    if (slice.end > slice.begin) plan.add_slice(slice.begin, slice.end);
  }
  const std::vector<ColumnCall>& calls = plan.calls();
#pragma omp parallel
  {
    std::vector<Real> scratch;
#pragma omp for schedule(dynamic, 1)
    for (size_t i = 0; i < calls.size(); ++i)
      run_column_call(calls[i], out, inp, weight, bias, N, C, OC, first, scratch);
  }
}

template <typename Real>
void linear_backward_columns(Real* dinp, Real* dweight, Real* dbias, const Real* dout, const Real* inp,
                             const Real* weight, int N, int C, int OC, int first, int W) {
  check_columns("linear_backward_columns", OC, first, W);
  // The layer's backward over the tile's strided columns of dout: W outputs instead of OC, rows OC apart.
  const auto dy = mat(dout + first, N, W, OC);
  const auto x = mat(inp, N, C, C);
#pragma omp parallel
  {
    if (dinp) {  // thread i: dX[:, c0:c1] += dY[:, tile] W_tile[:, c0:c1]
      const detail::Range r = detail::thread_range(C);
      if (r.end > r.begin) {
        auto dx = mat(dinp + r.begin, N, r.end - r.begin, C);
        dx.noalias() += dy * mat(weight + r.begin, W, r.end - r.begin, C);
      }
    }
    // thread i: dW_tile[o0:o1, :] += dY[:, first+o0:first+o1]^T X and db_tile[o0:o1] += their column sums
    const detail::Range r = detail::thread_range(W);
    if (r.end > r.begin) {
      const int64_t rows = r.end - r.begin;
      auto dw = mat(dweight + r.begin * C, rows, C, C);
      dw.noalias() += mat(dout + first + r.begin, N, rows, OC).transpose() * x;
      if (dbias) {
        for (int n = 0; n < N; ++n) {
          const Real* row = dout + int64_t(n) * OC + first;
#pragma omp simd
          for (int64_t o = r.begin; o < r.end; ++o) dbias[o] += row[o];
        }
      }
    }
  }
}

template void linear_forward<float>(float*, const float*, const float*, const float*, int, int, int);
template void linear_forward<double>(double*, const double*, const double*, const double*, int, int, int);
template void linear_backward<float>(float*, float*, float*, const float*, const float*, const float*, int,
                                     int, int);
template void linear_backward<double>(double*, double*, double*, const double*, const double*, const double*,
                                      int, int, int);
template void linear_forward_columns<float>(float*, const float*, const float*, const float*, int, int, int,
                                            int, int);
template void linear_forward_columns<double>(double*, const double*, const double*, const double*, int, int,
                                             int, int, int);
template void linear_backward_columns<float>(float*, float*, float*, const float*, const float*, const float*,
                                             int, int, int, int, int);
template void linear_backward_columns<double>(double*, double*, double*, const double*, const double*,
                                              const double*, int, int, int, int, int);

}  // namespace gpt::cpu
