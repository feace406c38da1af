// Memory-centric tiling's linear layer (kernels/cpu/linear.h, *_columns): computed tile by tile along its
// output features, the forward output and the weight and bias gradients equal the whole layer's bit for bit
// at 1, 2 and 3 threads, and the input gradient summed over the tiles is within 1e-6 (norm-wise) of the whole
// layer's. Tiles whose columns Eigen's kernels cannot reproduce throw instead of rounding differently.
#include <doctest/doctest.h>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/threads.h"
#include "tests/kernels/check.h"

namespace gpt::test {
namespace {

using cpu::linear_backward;
using cpu::linear_backward_columns;
using cpu::linear_forward;
using cpu::linear_forward_columns;

// Floats in one of Eigen's SIMD packets (8 with AVX2): its GEMM micro-kernels work in multiples of it.
constexpr int kPacket = Eigen::internal::unpacket_traits<Eigen::internal::packet_traits<float>::type>::size;

// Restores the thread count a test changed.
struct ThreadsGuard {
  int before = cpu::num_threads();
  ~ThreadsGuard() { cpu::set_num_threads(before); }
};

// n values uniform in [-1, 1) for a given seed. The big layers need tens of millions of values per case, more
// than the GEMMs take to generate one by one, so they are cut from one pool drawn once, at a seeded offset.
template <typename Real>
std::vector<Real> random_vec(Rng& rng, int64_t n) {
  static const std::vector<double> pool = Rng(2024).vec(int64_t(1) << 22);
  const int64_t size = int64_t(pool.size()), offset = rng.index(int32_t(size));
  std::vector<Real> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = Real(pool[(offset + i) % size]);
  return v;
}

// Columns [first, first + W) of the [N, OC] matrices a and b have the same bytes.
template <typename Real>
bool same_columns(const std::vector<Real>& a, const std::vector<Real>& b, int N, int OC, int first, int W) {
  for (int n = 0; n < N; ++n) {
    if (std::memcmp(&a[int64_t(n) * OC + first], &b[int64_t(n) * OC + first], sizeof(Real) * W) != 0)
      return false;
  }
  return true;
}

double relative_error(const std::vector<double>& got, const std::vector<double>& want) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    diff += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

// The tile-by-tile results of one layer: tile_factor equal tiles, each seeing only its own rows of w, b, dw
// and db (copies, as a gathered tile would).
template <typename Real>
struct Tiled {
  std::vector<Real> out, dx, dw, db;
};

template <typename Real>
Tiled<Real> run_tiles(int tile_factor, int N, int C, int OC, const std::vector<Real>& x,
                      const std::vector<Real>& w, const Real* bias, const std::vector<Real>& dout,
                      const std::vector<Real>& dw0, const std::vector<Real>& db0) {
  Tiled<Real> r{std::vector<Real>(int64_t(N) * OC, std::numeric_limits<Real>::quiet_NaN()),
                std::vector<Real>(int64_t(N) * C, Real(0)), dw0, db0};
  const int W = OC / tile_factor;
  // Buffers of exactly one tile (a read past the tile is past the buffer), refilled for each tile: fresh ones
  // per tile cost more page faults than the GEMMs under ASan.
  std::vector<Real> tile_w(int64_t(W) * C), tile_b(bias ? W : 0), tile_dw(int64_t(W) * C), tile_db(W);
  for (int first = 0; first < OC; first += W) {
    std::copy_n(w.begin() + int64_t(first) * C, tile_w.size(), tile_w.begin());
    if (bias) std::copy_n(bias + first, W, tile_b.begin());
    std::copy_n(dw0.begin() + int64_t(first) * C, tile_dw.size(), tile_dw.begin());
    std::copy_n(db0.begin() + first, W, tile_db.begin());
    linear_forward_columns(r.out.data(), x.data(), tile_w.data(), bias ? tile_b.data() : nullptr, N, C, OC,
                           first, W);
    linear_backward_columns(r.dx.data(), tile_dw.data(), bias ? tile_db.data() : nullptr, dout.data(),
                            x.data(), tile_w.data(), N, C, OC, first, W);
    std::copy(tile_dw.begin(), tile_dw.end(), r.dw.begin() + int64_t(first) * C);
    std::copy(tile_db.begin(), tile_db.end(), r.db.begin() + first);
  }
  return r;
}

// One layer [N, C] -> [N, OC] with its gradients, computed whole and in each of the tile factors; returns the
// largest input-gradient relative error. Everything else is required to be bit for bit.
template <typename Real>
double check_tiled_layer(int N, int C, int OC, const std::vector<int>& tile_factors, bool with_bias,
                         uint64_t seed) {
  CAPTURE(N);
  CAPTURE(C);
  CAPTURE(OC);
  CAPTURE(with_bias);
  Rng rng(seed);
  const auto x = random_vec<Real>(rng, int64_t(N) * C), w = random_vec<Real>(rng, int64_t(OC) * C);
  const auto b = random_vec<Real>(rng, OC), dout = random_vec<Real>(rng, int64_t(N) * OC);
  const auto dw0 = random_vec<Real>(rng, int64_t(OC) * C), db0 = random_vec<Real>(rng, OC);
  const Real* bias = with_bias ? b.data() : nullptr;

  std::vector<Real> out(int64_t(N) * OC), dx(int64_t(N) * C, Real(0)), dw = dw0, db = db0;
  linear_forward(out.data(), x.data(), w.data(), bias, N, C, OC);
  linear_backward(dx.data(), dw.data(), with_bias ? db.data() : nullptr, dout.data(), x.data(), w.data(), N,
                  C, OC);
  double worst = 0;
  for (int tile_factor : tile_factors) {
    CAPTURE(tile_factor);
    const Tiled<Real> t = run_tiles(tile_factor, N, C, OC, x, w, bias, dout, dw0, db0);
    CHECK(std::memcmp(t.out.data(), out.data(), sizeof(Real) * out.size()) == 0);
    CHECK(std::memcmp(t.dw.data(), dw.data(), sizeof(Real) * dw.size()) == 0);
    if (with_bias) CHECK(std::memcmp(t.db.data(), db.data(), sizeof(Real) * db.size()) == 0);
    const double error = relative_error({t.dx.begin(), t.dx.end()}, {dx.begin(), dx.end()});
    CHECK(error <= 1e-6);
    worst = std::max(worst, error);
  }
  return worst;
}

TEST_CASE("a linear layer computed tile by tile equals the whole layer (fp32, 1 to 3 threads)") {
  ThreadsGuard guard;
  double worst = 0;
  int layers = 0;
  for (int threads = 1; threads <= 3; ++threads) {
    cpu::set_num_threads(threads);
    CAPTURE(threads);
    for (int C : {32, 64, 96, 768, 1600}) {
      // Big layers at few rows keep the test short; the small ones also run at a full micro-batch.
      const std::vector<int> rows = C <= 96 ? std::vector<int>{1, 7, 64} : std::vector<int>{1, 7};
      for (int OC : {C, 3 * C, 4 * C}) {
        std::vector<int> tile_factors;  // those giving tiles a multiple of 16 and at least 2 packets wide
        for (int f : {2, 4, 8})
          if (OC % f == 0 && (OC / f) % 16 == 0 && OC / f >= 2 * kPacket) tile_factors.push_back(f);
        for (int N : rows) {
          worst = std::max(worst, check_tiled_layer<float>(N, C, OC, tile_factors, (N + OC / 16) % 2 == 1,
                                                           uint64_t(C * 131 + OC * 7 + N)));
          layers += int(tile_factors.size());
        }
      }
    }
  }
  MESSAGE("fp32: " << layers << " tiled layers; largest input-gradient relative error " << worst);
}

TEST_CASE("a linear layer computed tile by tile equals the whole layer (fp64)") {
  ThreadsGuard guard;
  double worst = 0;
  for (int threads = 1; threads <= 3; ++threads) {
    cpu::set_num_threads(threads);
    CAPTURE(threads);
    for (int C : {32, 96})
      for (int N : {1, 7, 64})
        worst = std::max(worst, check_tiled_layer<double>(N, C, 3 * C, {2, 4}, N != 7, uint64_t(C + N)));
  }
  MESSAGE("fp64: largest input-gradient relative error " << worst);
}

// Arbitrary tile boundaries (odd widths, an odd OC): a tile either throws or matches the whole layer.
TEST_CASE("tiles at arbitrary boundaries match the whole layer bit for bit or throw") {
  ThreadsGuard guard;
  int exact = 0, refused = 0;
  for (int threads = 1; threads <= 3; ++threads) {
    cpu::set_num_threads(threads);
    CAPTURE(threads);
    for (int OC : {77, 100, 250}) {
      const int N = 9, C = 40;
      Rng rng(uint64_t(OC * 10 + threads));
      const auto x = random_vec<float>(rng, int64_t(N) * C), w = random_vec<float>(rng, int64_t(OC) * C);
      const auto b = random_vec<float>(rng, OC);
      std::vector<float> out(int64_t(N) * OC);
      linear_forward(out.data(), x.data(), w.data(), b.data(), N, C, OC);
      for (int trial = 0; trial < 60; ++trial) {
        const int first = rng.index(OC), W = 1 + rng.index(OC - first);
        CAPTURE(first);
        CAPTURE(W);
        std::vector<float> tiled(out.size(), std::numeric_limits<float>::quiet_NaN());
        try {
          linear_forward_columns(tiled.data(), x.data(), w.data() + int64_t(first) * C, b.data() + first, N,
                                 C, OC, first, W);
        } catch (const std::invalid_argument&) {
          ++refused;
          continue;
        }
        CHECK(same_columns(tiled, out, N, OC, first, W));
        ++exact;
      }
    }
  }
  MESSAGE(exact << " arbitrary tiles matched bit for bit, " << refused << " were refused");
  CHECK(exact > 0);
  CHECK(refused > 0);
}

TEST_CASE("a tile whose columns cannot be reproduced throws") {
  ThreadsGuard guard;
  cpu::set_num_threads(1);
  constexpr int P = kPacket;
  // One thread, OC = 4P: Eigen computes columns [0, 3P) sequentially and [3P, 4P) as its tail.
  const int N = 3, C = 32, OC = 4 * P;
  Rng rng(5);
  const auto x = random_vec<float>(rng, int64_t(N) * C), w = random_vec<float>(rng, int64_t(OC) * C);
  std::vector<float> out(int64_t(N) * OC);
  auto tile = [&](int first, int W) {
    linear_forward_columns<float>(out.data(), x.data(), w.data() + int64_t(first) * C, nullptr, N, C, OC,
                                  first, W);
  };
  CHECK_THROWS_AS(tile(0, 3 * P + P / 2), std::invalid_argument);  // cuts the tail
  CHECK_THROWS_AS(tile(3 * P + P / 2, P / 2), std::invalid_argument);
  CHECK_THROWS_AS(tile(P, P), std::invalid_argument);  // too narrow for a sequential window
  CHECK_THROWS_AS(tile(0, OC + 1), std::invalid_argument);
  CHECK_NOTHROW(tile(0, 3 * P));
  CHECK_NOTHROW(tile(3 * P, P));
  CHECK_NOTHROW(tile(2 * P, 2 * P));
}

TEST_CASE("CpuOps' tile ops match its whole-layer ops and check their shapes") {
  const int N = 5, C = 64, OC = 128, first = 32, W = 64;
  Rng rng(9);
  auto x = random_vec<float>(rng, int64_t(N) * C), w = random_vec<float>(rng, int64_t(OC) * C);
  auto b = random_vec<float>(rng, OC), dout = random_vec<float>(rng, int64_t(N) * OC);
  auto tensor = [](std::vector<float>& v, std::vector<int64_t> shape) {
    Tensor t;
    t.data = v.data();
    t.shape = std::move(shape);
    return t;
  };
  CpuOps& ops = cpu_ops();
  std::vector<float> out(int64_t(N) * OC), tiled(out.size());
  ops.linear_forward(tensor(out, {N, OC}), tensor(x, {N, C}), tensor(w, {OC, C}), tensor(b, {OC}));
  std::vector<float> tile_w(w.begin() + int64_t(first) * C, w.begin() + int64_t(first + W) * C);
  std::vector<float> tile_b(b.begin() + first, b.begin() + first + W);
  ops.linear_forward_columns(tensor(tiled, {N, OC}), first, tensor(x, {N, C}), tensor(tile_w, {W, C}),
                             tensor(tile_b, {W}));
  CHECK(same_columns(tiled, out, N, OC, first, W));

  std::vector<float> dx(int64_t(N) * C, 0.f), dw(int64_t(OC) * C, 0.f), db(OC, 0.f);
  std::vector<float> tile_dw(int64_t(W) * C, 0.f), tile_db(W, 0.f);
  ops.linear_backward(Tensor(), tensor(dw, {OC, C}), tensor(db, {OC}), tensor(dout, {N, OC}),
                      tensor(x, {N, C}), tensor(w, {OC, C}));
  ops.linear_backward_columns(tensor(dx, {N, C}), tensor(tile_dw, {W, C}), tensor(tile_db, {W}),
                              tensor(dout, {N, OC}), first, tensor(x, {N, C}), tensor(tile_w, {W, C}));
  CHECK(std::equal(tile_dw.begin(), tile_dw.end(), dw.begin() + int64_t(first) * C));
  CHECK(std::equal(tile_db.begin(), tile_db.end(), db.begin() + first));

  CHECK_THROWS_AS(ops.linear_forward_columns(tensor(tiled, {N, OC}), OC - 16, tensor(x, {N, C}),
                                             tensor(tile_w, {W, C}), Tensor()),
                  std::invalid_argument);  // past the layer's last column
  CHECK_THROWS_AS(ops.linear_forward_columns(tensor(tiled, {N, OC}), first, tensor(x, {N, C}),
                                             tensor(tile_w, {W, C}), tensor(b, {OC})),
                  std::invalid_argument);  // the whole bias instead of the tile's
  CHECK_THROWS_AS(ops.linear_backward_columns(Tensor(), tensor(dw, {OC, C}), Tensor(), tensor(dout, {N, OC}),
                                              first, tensor(x, {N, C}), tensor(tile_w, {W, C})),
                  std::invalid_argument);  // the whole weight gradient instead of the tile's
}

}  // namespace
}  // namespace gpt::test
