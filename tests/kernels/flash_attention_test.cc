// The FlashAttention-2 reference (kernels/cpu/flash_attention.h) against the CPU attention (attention.h):
// out, lse and dqkv in fp32 within 1e-6 of the largest magnitude (max|a-b| / max|b|) and in fp64 within
// 1e-13, dropout off and on, T not a multiple of the tile, head sizes 8, 64 and 128; lse against a double
// recomputation; tiles of other shapes; and no T x T allocation (the largest one is watched at T = 4096).
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <ostream>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/flash_attention.h"
#include "kernels/cpu/threads.h"
#include "tests/kernels/check.h"
#include "tests/sanitized_build.h"

// The size of the largest allocation through operator new since the last reset (the kernels' scratch is
// std::vector): how the T = 4096 case shows that nothing of T x T size is allocated.
static std::atomic<size_t> g_largest_allocation{0};

void* operator new(size_t n) {
  size_t seen = g_largest_allocation.load();
  while (n > seen && !g_largest_allocation.compare_exchange_weak(seen, n)) {
  }
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, size_t) noexcept {
  std::free(p);
}

namespace gpt::test {
namespace {

using namespace gpt::cpu;

const std::vector<uint64_t> kKeys = {0x1234567ULL, 0xFEDCBA98ULL};
constexpr double kDropP = 0.1;

struct Shape {
  int B, T, C, NH;
};

template <typename Real>
double max_abs(const std::vector<Real>& v) {
  double m = 0;
  for (Real x : v) m = std::max(m, std::abs(double(x)));
  return m;
}

// max|got - want| / max(max|want|, floor): the error relative to the largest magnitude.
template <typename A, typename B>
double relative_error(const std::vector<A>& got, const std::vector<B>& want, double floor = 0) {
  REQUIRE(got.size() == want.size());
  double diff = 0;
  for (size_t i = 0; i < want.size(); ++i) diff = std::max(diff, std::abs(double(got[i]) - double(want[i])));
  const double scale = std::max(max_abs(want), floor);
  return scale > 0 ? diff / scale : diff;
}

// The same over the q, k or v part (part 0, 1, 2) of a [B,T,3C] buffer.
template <typename A, typename B>
double part_error(const std::vector<A>& got, const std::vector<B>& want, int C, int part, double floor) {
  std::vector<A> g;
  std::vector<B> w;
  for (size_t i = 0; i < want.size(); ++i)
    if (int(i % (3 * C)) / C == part) g.push_back(got[i]), w.push_back(want[i]);
  return relative_error(g, w, floor);
}

// The errors of one comparison: forward out, backward dqkv from zero (whole, and its q, k, v parts) and from
// non-zero starting values (the accumulation).
struct Errors {
  double out, dqkv, dq, dk, dv, accumulated;
};

// One implementation's results on one case.
template <typename Real>
struct Results {
  std::vector<Real> out, grad, acc;
};

// q and k span [-qk, qk] (scores of standard deviation about 0.67 qk whatever the head size), v [-1, 1].
template <typename Real>
std::vector<Real> random_qkv(Rng& rng, const Shape& s, double qk) {
  std::vector<Real> qkv(int64_t(s.B) * s.T * 3 * s.C);
  for (size_t i = 0; i < qkv.size(); ++i)
    qkv[i] = Real(int(i % (3 * s.C)) < 2 * s.C ? rng.uniform(-qk, qk) : rng.uniform(-1, 1));
  return qkv;
}

template <typename Real>
std::vector<Real> random_vec(Rng& rng, int64_t n) {
  std::vector<Real> v(n);
  for (Real& x : v) x = Real(rng.uniform(-1, 1));
  return v;
}

template <typename To, typename From>
std::vector<To> cast(const std::vector<From>& v) {
  return {v.begin(), v.end()};
}

// The CPU attention (flash = false) or the flash reference on one case: out, dqkv from 0 and from start.
template <typename Real>
Results<Real> run(bool flash, const Shape& s, const std::vector<Real>& qkv, const std::vector<Real>& dout,
                  const std::vector<Real>& start, const AttentionDropout* dropout, FlashTiles tiles) {
  const auto [B, T, C, NH] = s;
  Results<Real> r{std::vector<Real>(dout.size()), std::vector<Real>(qkv.size(), Real(0)), start};
  if (!flash) {
    std::vector<Real> att(int64_t(B) * NH * T * T);
    attention_forward(r.out.data(), att.data(), qkv.data(), B, T, C, NH, dropout);
    for (Real* g : {r.grad.data(), r.acc.data()})
      attention_backward(g, dout.data(), qkv.data(), att.data(), B, T, C, NH, dropout);
  } else {
    std::vector<Real> lse(int64_t(B) * NH * T);
    flash_attention_forward(r.out.data(), lse.data(), qkv.data(), B, T, C, NH, dropout, tiles);
    for (Real* g : {r.grad.data(), r.acc.data()})
      flash_attention_backward(g, dout.data(), qkv.data(), r.out.data(), lse.data(), B, T, C, NH, dropout,
                               tiles);
  }
  return r;
}

// got against want. At T = 1, dq and dk are 0 in exact arithmetic (one key: the softmax's gradient vanishes)
// and both sides hold rounding noise with dropout; they are measured against the whole dqkv's magnitude.
template <typename A, typename B>
Errors errors(const Results<A>& got, const Results<B>& want, const Shape& s) {
  const double floor = s.T == 1 ? max_abs(want.grad) : 0;
  return {relative_error(got.out, want.out),
          relative_error(got.grad, want.grad),
          part_error(got.grad, want.grad, s.C, 0, floor),
          part_error(got.grad, want.grad, s.C, 1, floor),
          part_error(got.grad, want.grad, s.C, 2, floor),
          relative_error(got.acc, want.acc)};
}

// Flash against the CPU attention in Real, and each of them against the CPU attention in double on the same
// inputs (the exact result to fp32's eyes).
struct Comparison {
  Errors flash_cpu, flash_exact, cpu_exact;
};

template <typename Real>
Comparison compare(const Shape& s, const AttentionDropout* dropout, double qk = 2, FlashTiles tiles = {}) {
  Rng rng(1000 + s.T + s.C);
  const auto qkv = random_qkv<Real>(rng, s, qk);
  const auto dout = random_vec<Real>(rng, int64_t(s.B) * s.T * s.C);
  const auto start = random_vec<Real>(rng, int64_t(qkv.size()));
  const Results<Real> cpu = run(false, s, qkv, dout, start, dropout, tiles);
  const Results<Real> flash = run(true, s, qkv, dout, start, dropout, tiles);
  const Results<double> exact =
      run(false, s, cast<double>(qkv), cast<double>(dout), cast<double>(start), dropout, tiles);
  return {errors(flash, cpu, s), errors(flash, exact, s), errors(cpu, exact, s)};
}

constexpr Shape kShapes[] = {{2, 1, 24, 3},  {2, 37, 24, 3},  {2, 100, 24, 3},  {2, 130, 24, 3},    // hs 8
                             {2, 1, 128, 2}, {2, 37, 128, 2}, {2, 100, 128, 2}, {2, 130, 128, 2},   // hs 64
                             {2, 1, 256, 2}, {2, 37, 256, 2}, {2, 100, 256, 2}, {2, 130, 256, 2}};  // hs 128

std::ostream& operator<<(std::ostream& os, const Errors& e) {
  return os << "out " << e.out << ", dqkv " << e.dqkv << " (dq " << e.dq << ", dk " << e.dk << ", dv " << e.dv
            << "), accumulated " << e.accumulated;
}

void report(const char* what, const Shape& s, double p, const Comparison& c) {
  MESSAGE(what << " T=" << s.T << " hs=" << s.C / s.NH << " p=" << p << "\n  flash-cpu   " << c.flash_cpu
               << "\n  flash-exact " << c.flash_exact << "\n  cpu-exact   " << c.cpu_exact);
}

// The bounds: out, dqkv as a whole, its dv part and the accumulated dqkv within tol of the CPU attention;
// the dq and dk parts within part_tol (see the fp32 test case for why they get their own); and each field of
// flash's error against the fp64 attention at most twice the CPU attention's plus tol (flash is no less
// accurate than the CPU attention, up to its own rounding).
void check_errors(const Comparison& c, double tol, double part_tol) {
  const Errors& e = c.flash_cpu;
  CHECK(e.out <= tol);
  CHECK(e.dqkv <= tol);
  CHECK(e.dq <= part_tol);
  CHECK(e.dk <= part_tol);
  CHECK(e.dv <= tol);
  CHECK(e.accumulated <= tol);
  const Errors &f = c.flash_exact, &g = c.cpu_exact;
  CHECK(f.out <= 2 * g.out + tol);
  CHECK(f.dqkv <= 2 * g.dqkv + tol);
  CHECK(f.dq <= 2 * g.dq + tol);
  CHECK(f.dk <= 2 * g.dk + tol);
  CHECK(f.dv <= 2 * g.dv + tol);
  CHECK(f.accumulated <= 2 * g.accumulated + tol);
}

// Why dq and dk get 2e-6: flash's backward takes Dr_i = dout_i . out_i from the stored output
// (FlashAttention-2's D), where the CPU attention sums P_ik dA_ik over the row's own dA. dS_ij = P_ij (dA_ij
// - Dr_i) cancels, and the fp32 rounding of Dr (a dot over hs terms) and of dA_ij no longer cancel with it.
// Measured (flash against the CPU attention, relative to the part's largest magnitude): dq up to 1.15e-6 (T =
// 37, hs = 128, p = 0.1; flash 1.19e-6 from the fp64 attention where the CPU attention is 4.7e-7); with Dr
// summed in double it was 5.8e-7. out, dqkv as a whole and dv stay under 6.2e-7 in every case.
TEST_CASE("fp32 flash attention equals the CPU attention within 1e-6, dropout off and on") {
  const AttentionDropout dropout{kDropP, kKeys.data()};
  for (const Shape& s : kShapes)
    for (const AttentionDropout* d : {static_cast<const AttentionDropout*>(nullptr), &dropout}) {
      CAPTURE(s.T);
      CAPTURE(s.C);
      CAPTURE(d != nullptr);
      const Comparison e = compare<float>(s, d);
      report("fp32", s, d ? kDropP : 0.0, e);
      check_errors(e, 1e-6, 2e-6);
    }
}

TEST_CASE("fp64 flash attention equals the CPU attention within 1e-13, dropout off and on") {
  const AttentionDropout dropout{kDropP, kKeys.data()};
  for (const Shape& s : {kShapes[3], kShapes[7], kShapes[11]})
    for (const AttentionDropout* d : {static_cast<const AttentionDropout*>(nullptr), &dropout}) {
      CAPTURE(s.T);
      CAPTURE(s.C);
      const Comparison e = compare<double>(s, d);
      report("fp64", s, d ? kDropP : 0.0, e);
      check_errors(e, 1e-13, 1e-13);
    }
}

// q, k in [-8, 8]: scores of standard deviation about 5 (up to about 30), rows dominated by a few keys, and
// the running max growing tile after tile. 1e-6 is out of reach here for any pair of fp32 implementations: a
// score's rounding error is eps times sum_d |q_d k_d| / sqrt(hs) (about 180 at hs = 128), an absolute error
// of 1e-6 to 1e-5 that exp turns into a relative error of P. Measured: the CPU attention itself is 2.9e-6
// (hs 8), 7.5e-6 (hs 64) and 1.3e-5 (hs 128) from the fp64 attention in out, flash the same to 3 digits, and
// flash against the CPU attention up to 5.8e-6 (out) and 5.7e-6 (dq). Bounded at 1e-5, and flash's accuracy
// against the fp64 attention as the CPU attention's (check_errors).
TEST_CASE("peaked scores: the error is the scores' fp32 rounding, the same as the CPU attention's") {
  const AttentionDropout dropout{kDropP, kKeys.data()};
  for (const Shape& s : {kShapes[3], kShapes[7], kShapes[11]})
    for (const AttentionDropout* d : {static_cast<const AttentionDropout*>(nullptr), &dropout}) {
      CAPTURE(s.C);
      const Comparison e = compare<float>(s, d, 8.0);
      report("fp32 peaked", s, d ? kDropP : 0.0, e);
      check_errors(e, 1e-5, 1e-5);
    }
}

TEST_CASE("tiles of other shapes (Br != Bc, 1 x 1, wider than T) give the same attention") {
  const AttentionDropout dropout{kDropP, kKeys.data()};
  for (FlashTiles tiles : {FlashTiles{16, 48}, FlashTiles{48, 16}, FlashTiles{1, 1}, FlashTiles{256, 256}}) {
    CAPTURE(tiles.rows);
    CAPTURE(tiles.cols);
    const Comparison e = compare<float>(kShapes[6], &dropout, 2.0, tiles);
    MESSAGE("tiles " << tiles.rows << " x " << tiles.cols);
    report("fp32", kShapes[6], kDropP, e);
    check_errors(e, 1e-6, 2e-6);
    check_errors(compare<double>(kShapes[2], nullptr, 2.0, tiles), 1e-13, 1e-13);
  }
}

TEST_CASE("dropout draws the CPU attention's masks, at an element offset too") {
  // An offset as a tensor-parallel rank passes it; the flash reference must draw the same counters.
  const Shape s{2, 37, 128, 2};
  const AttentionDropout shifted{0.3, kKeys.data(), 5 * 37 * 37};
  const Comparison e = compare<float>(s, &shifted);
  report("fp32 offset", s, 0.3, e);
  check_errors(e, 1e-6, 2e-6);
  // and dropout changes the output (the masks were exercised)
  Rng rng(7);
  const auto qkv = random_qkv<float>(rng, s, 2);
  std::vector<float> plain(int64_t(s.B) * s.T * s.C), dropped(plain.size()), lse(int64_t(s.B) * s.NH * s.T);
  flash_attention_forward(plain.data(), lse.data(), qkv.data(), s.B, s.T, s.C, s.NH);
  flash_attention_forward(dropped.data(), lse.data(), qkv.data(), s.B, s.T, s.C, s.NH, &shifted);
  CHECK(relative_error(dropped, plain) > 1e-2);
}

TEST_CASE("flash attention gives bit-identical results with 1 and 2 threads") {
  // Threads split the (sequence, head) pairs; a pair's arithmetic is the same on any thread.
  const Shape s{3, 70, 64, 4};
  const std::vector<uint64_t> keys = {1, 2, 3};
  const AttentionDropout three{kDropP, keys.data()};
  Rng rng(13);
  const auto qkv = random_qkv<float>(rng, s, 2);
  const auto dout = random_vec<float>(rng, int64_t(s.B) * s.T * s.C);
  std::vector<float> out[2], lse[2], dqkv[2];
  const int before = num_threads();
  for (int k = 0; k < 2; ++k) {
    set_num_threads(k + 1);
    out[k].resize(dout.size());
    lse[k].resize(int64_t(s.B) * s.NH * s.T);
    dqkv[k].assign(qkv.size(), 0.f);
    flash_attention_forward(out[k].data(), lse[k].data(), qkv.data(), s.B, s.T, s.C, s.NH, &three);
    flash_attention_backward(dqkv[k].data(), dout.data(), qkv.data(), out[k].data(), lse[k].data(), s.B, s.T,
                             s.C, s.NH, &three);
  }
  set_num_threads(before);
  CHECK(out[0] == out[1]);
  CHECK(lse[0] == lse[1]);
  CHECK(dqkv[0] == dqkv[1]);
}

// lse [B,NH,T] by doubles: log sum_j<=i exp(s_ij) of the scaled scores of the float inputs.
std::vector<double> lse_in_double(const std::vector<float>& qkv, const Shape& s) {
  const auto [B, T, C, NH] = s;
  const int hs = C / NH;
  std::vector<double> lse;
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int i = 0; i < T; ++i) {
        std::vector<double> sc(i + 1);
        for (int j = 0; j <= i; ++j) {
          double d = 0;
          for (int c = 0; c < hs; ++c)
            d += double(qkv[(int64_t(b) * T + i) * 3 * C + h * hs + c]) *
                 double(qkv[(int64_t(b) * T + j) * 3 * C + C + h * hs + c]);
          sc[j] = d / std::sqrt(double(hs));
        }
        const double mx = *std::max_element(sc.begin(), sc.end());
        double sum = 0;
        for (double x : sc) sum += std::exp(x - mx);
        lse.push_back(mx + std::log(sum));
      }
  return lse;
}

TEST_CASE("lse is log(sum exp) of each row's scaled causal scores, recomputed in double") {
  const AttentionDropout dropout{kDropP, kKeys.data()};
  for (const Shape& s : {kShapes[1], kShapes[3], kShapes[7], kShapes[11]})
    for (double qk : {2.0, 8.0}) {
      CAPTURE(s.C);
      CAPTURE(qk);
      Rng rng(9);
      const auto qkv = random_qkv<float>(rng, s, qk);
      std::vector<float> out(int64_t(s.B) * s.T * s.C), lse(int64_t(s.B) * s.NH * s.T);
      flash_attention_forward(out.data(), lse.data(), qkv.data(), s.B, s.T, s.C, s.NH, &dropout);
      const std::vector<double> want = lse_in_double(qkv, s);
      const double err = relative_error(std::vector<double>(lse.begin(), lse.end()), want);
      MESSAGE("lse T=" << s.T << " hs=" << s.C / s.NH << " qk=" << qk << ": " << err);
      CHECK(err <= 1e-6);
    }
}

TEST_CASE("T = 4096: no T x T allocation, and flash still equals the CPU attention") {
  // A T x T float matrix would be 64 MB; the flash forward's largest scratch is one query tile's o [Br, hs],
  // the backward's the head's dq [T, hs]. (13 s in the optimized build; T = 1024 under the sanitizers.)
  const Shape s{1, kSanitizedBuild ? 1024 : 4096, 16, 1};
  const AttentionDropout dropout{kDropP, kKeys.data()};
  Rng rng(11);
  const auto qkv = random_qkv<float>(rng, s, 2);
  const auto dout = random_vec<float>(rng, int64_t(s.T) * s.C);
  std::vector<float> out(int64_t(s.T) * s.C), lse(s.T), dqkv(qkv.size(), 0.f);
  const size_t hs_row = sizeof(float) * s.C / s.NH;
  g_largest_allocation = 0;
  flash_attention_forward(out.data(), lse.data(), qkv.data(), s.B, s.T, s.C, s.NH, &dropout);
  CHECK(g_largest_allocation.load() <= kFlashRows * hs_row);
  g_largest_allocation = 0;
  flash_attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), s.B, s.T, s.C, s.NH,
                           &dropout);
  CHECK(g_largest_allocation.load() <= s.T * hs_row);
  // Rows of up to 4096 keys and columns of up to 4096 queries: the sums of l, o, dq, dk and dv over T.
  // Measured against the CPU attention: out 2.3e-7, dqkv 6.0e-7 (dv; dk 5.7e-7), where one serial chain over
  // T (before the two-level sums of flash_attention.h) gave dv 1.6e-6 and dk 2.3e-6.
  const Comparison e = compare<float>(s, &dropout);
  report("fp32", s, kDropP, e);
  check_errors(e, 1e-6, 2e-6);
}

}  // namespace
}  // namespace gpt::test
