// FlashAttention-2, CPU reference: plain loops in the order flash_attention.h documents (its first lines are
// the specification; this file is meant to be read next to them). Threads split the (sequence, head) pairs;
// a pair's numbers do not depend on which thread computes it.
#include "kernels/cpu/flash_attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/common/dropout_bits.h"

namespace gpt::cpu {
namespace {

// One (sequence, head): strided views into the fused buffers and the dropout rule of its probabilities.
template <typename Real>
struct Head {
  const Real* q;  // q_i,d = q[i*stride + d]; k and v likewise
  const Real* k;
  const Real* v;
  int64_t stride;  // 3C
  int T, hs;
  Real scale;  // 1/sqrt(hs)
  bool drop;
  uint64_t key, counter0, threshold;  // probability (i, j) draws counter counter0 + i*T + j under key
  Real keep_scale;                    // 1/(1-p)

  // s_ij = scale * dot(q_i, k_j): an fma chain over d ascending, then the scale.
  Real score(int i, int j) const {
    const Real* qi = q + i * stride;
    const Real* kj = k + j * stride;
    Real dot = 0;
    for (int d = 0; d < hs; ++d) dot = std::fma(qi[d], kj[d], dot);
    return scale * dot;
  }
  // x as dropout leaves it at (i, j): x / (1-p) when kept, 0 when dropped; x without dropout.
  Real dropped(Real x, int i, int j) const {
    if (!drop) return x;
    const uint64_t counter = counter0 + uint64_t(i) * uint64_t(T) + uint64_t(j);
    return dropout::keeps(key, counter, threshold) ? x * keep_scale : Real(0);
  }
};

template <typename Real>
Head<Real> make_head(const Real* qkv, int b, int h, int T, int C, int NH, const AttentionDropout* dropout) {
  const int hs = C / NH;
  const int64_t C3 = 3 * int64_t(C);
  const Real* base = qkv + int64_t(b) * T * C3 + int64_t(h) * hs;
  Head<Real> head{base, base + C, base + 2 * int64_t(C), C3, T, hs, Real(1) / std::sqrt(Real(hs))};
  head.drop = dropout != nullptr && dropout->p > 0;
  if (head.drop) {
    head.key = dropout->keys[b];
    head.counter0 = uint64_t(dropout->element_offset) + uint64_t(h) * uint64_t(T) * uint64_t(T);
    head.threshold = dropout::threshold(dropout->p);
    head.keep_scale = dropout::scale<Real>(dropout->p);
  }
  return head;
}

// dot(a, b) over n values: an fma chain, ascending.
template <typename Real>
Real dot(const Real* a, const Real* b, int n) {
  Real acc = 0;
  for (int d = 0; d < n; ++d) acc = std::fma(a[d], b[d], acc);
  return acc;
}

// ---- forward ----

// The running state of one query row across key tiles: max m, sum l, unnormalized output o (hs values).
template <typename Real>
struct RowState {
  Real m = -std::numeric_limits<Real>::infinity();
  Real l = 0;
  Real* o;
};

// Folds key columns [j0, j1) (all j <= i, j1 > j0) into row i's state: the online softmax step. s [Bc] and
// pv [hs] are scratch. The tile's own sums start from 0 (as a GEMM tile does), so a row's chains are a tile
// long plus one fma per tile, not T long. The old l and o are rescaled by exp(m - m') when the max grows
// (exp(-inf) = 0 on the first tile), so every p_j = exp(s_ij - current max) <= 1 and nothing overflows.
template <typename Real>
void online_softmax_step(RowState<Real>& row, Real* s, Real* pv, const Head<Real>& head, int i, int j0,
                         int j1) {
  Real m_new = row.m;
  for (int j = j0; j < j1; ++j) {
    s[j - j0] = head.score(i, j);
    m_new = std::max(m_new, s[j - j0]);
  }
  Real rowsum = 0;  // the softmax's denominator counts every probability, dropped or not
  std::fill(pv, pv + head.hs, Real(0));
  for (int j = j0; j < j1; ++j) {
    const Real p = std::exp(s[j - j0] - m_new);
    rowsum += p;
    const Real pd = head.dropped(p, i, j);
    const Real* vj = head.v + j * head.stride;
    for (int d = 0; d < head.hs; ++d) pv[d] = std::fma(pd, vj[d], pv[d]);
  }
  const Real alpha = std::exp(row.m - m_new);
  row.l = std::fma(alpha, row.l, rowsum);
  for (int d = 0; d < head.hs; ++d) row.o[d] = std::fma(alpha, row.o[d], pv[d]);
  row.m = m_new;
}

// One query tile [i0, i1) of one head: key tiles at or below the diagonal in ascending order, then the
// normalization. out_rows points at row i0 of the head's output (rows C apart); lse_rows at its lse of row
// i0. o, s and pv are scratch of (i1 - i0) * hs, Bc and hs values.
template <typename Real>
void forward_query_tile(Real* out_rows, Real* lse_rows, const Head<Real>& head, int i0, int i1, int C,
                        int cols, Real* o, Real* s, Real* pv) {
  std::vector<RowState<Real>> rows(i1 - i0);
  for (int r = 0; r < i1 - i0; ++r) rows[r].o = o + int64_t(r) * head.hs;
  std::fill(o, o + int64_t(i1 - i0) * head.hs, Real(0));
  for (int j0 = 0; j0 < i1; j0 += cols) {  // causal: no key tile starts after the tile's last row
    for (int i = i0; i < i1; ++i) {
      const int j1 = std::min(j0 + cols, i + 1);  // the diagonal tile masks j > i
      if (j1 > j0) online_softmax_step(rows[i - i0], s, pv, head, i, j0, j1);
    }
  }
  for (int i = i0; i < i1; ++i) {
    const RowState<Real>& row = rows[i - i0];
    const Real inv = Real(1) / row.l;
    Real* y = out_rows + int64_t(i - i0) * C;
    for (int d = 0; d < head.hs; ++d) y[d] = row.o[d] * inv;
    lse_rows[i - i0] = row.m + std::log(row.l);
  }
}

// ---- backward ----

// The gradient state of one (sequence, head): its dout, out and lse rows, Dr_i = dot(dout_i, out_i), the
// accumulators dq [T, hs] and, for the key tile in progress, dk and dv [Bc, hs], and one block's partial sums
// dq_part [Br, hs], dk_part and dv_part [Bc, hs].
template <typename Real>
struct HeadGrad {
  const Real* dout;  // dout_i,d = dout[i*C + d]; out likewise
  const Real* out;
  const Real* lse;  // [T]
  int C;
  std::vector<Real> Dr, dq, dk, dv, dq_part, dk_part, dv_part;
};

// The contribution of query row i (in the query tile from i0) to key columns [j0, j1) (j1 <= i + 1), into
// the block's partial sums: P recomputed from lse, dropout's mask applied where P multiplied V in the
// forward, and dS through softmax's Jacobian (scale folded in).
template <typename Real>
void backward_row(HeadGrad<Real>& g, const Head<Real>& head, int i, int i0, int j0, int j1) {
  const int hs = head.hs;
  const Real* qi = head.q + i * head.stride;
  const Real* doi = g.dout + int64_t(i) * g.C;
  Real* dqi = g.dq_part.data() + int64_t(i - i0) * hs;
  for (int j = j0; j < j1; ++j) {
    const Real p = std::exp(head.score(i, j) - g.lse[i]);
    const Real* vj = head.v + j * head.stride;
    const Real* kj = head.k + j * head.stride;
    const Real dp = dot(doi, vj, hs);  // dL/d(dropped P_ij)
    const Real ds = p * (head.dropped(dp, i, j) - g.Dr[i]) * head.scale;
    const Real pd = head.dropped(p, i, j);
    Real* dvj = g.dv_part.data() + int64_t(j - j0) * hs;
    Real* dkj = g.dk_part.data() + int64_t(j - j0) * hs;
    for (int d = 0; d < hs; ++d) {
      dvj[d] = std::fma(pd, doi[d], dvj[d]);
      dkj[d] = std::fma(ds, qi[d], dkj[d]);
      dqi[d] = std::fma(ds, kj[d], dqi[d]);
    }
  }
}

// acc[e] += part[e] for e < n.
template <typename Real>
void add_into(Real* acc, const Real* part, int64_t n) {
  for (int64_t e = 0; e < n; ++e) acc[e] += part[e];
}

// One block: query tile [i0, i1) against key tile [j0, j1). Its sums start from 0 (rows ascending for dk and
// dv, columns ascending for dq), then are added to the accumulators, as a GEMM tile accumulates: a sum's
// chain is a tile long plus one addition per tile, not T long.
template <typename Real>
void backward_block(HeadGrad<Real>& g, const Head<Real>& head, int i0, int i1, int j0, int j1) {
  const int64_t hs = head.hs;
  std::fill(g.dq_part.begin(), g.dq_part.begin() + (i1 - i0) * hs, Real(0));
  std::fill(g.dk_part.begin(), g.dk_part.begin() + (j1 - j0) * hs, Real(0));
  std::fill(g.dv_part.begin(), g.dv_part.begin() + (j1 - j0) * hs, Real(0));
  for (int i = std::max(i0, j0); i < i1; ++i) backward_row(g, head, i, i0, j0, std::min(j1, i + 1));
  add_into(g.dq.data() + i0 * hs, g.dq_part.data(), (i1 - i0) * hs);
  add_into(g.dk.data(), g.dk_part.data(), (j1 - j0) * hs);
  add_into(g.dv.data(), g.dv_part.data(), (j1 - j0) * hs);
}

// One key tile [j0, j1): the query tiles that reach it (from the one holding j0, causal), then dk and dv
// added into dqkv's k and v rows (dk_rows, dv_rows: rows 3C apart).
template <typename Real>
void backward_key_tile(HeadGrad<Real>& g, const Head<Real>& head, int j0, int j1, int rows, Real* dk_rows,
                       Real* dv_rows) {
  const int hs = head.hs;
  std::fill(g.dk.begin(), g.dk.end(), Real(0));
  std::fill(g.dv.begin(), g.dv.end(), Real(0));
  for (int i0 = j0 / rows * rows; i0 < head.T; i0 += rows)
    backward_block(g, head, i0, std::min(i0 + rows, head.T), j0, j1);
  for (int j = j0; j < j1; ++j) {
    Real* dk = dk_rows + (j - j0) * head.stride;
    Real* dv = dv_rows + (j - j0) * head.stride;
    for (int d = 0; d < hs; ++d) {
      dk[d] += g.dk[int64_t(j - j0) * hs + d];
      dv[d] += g.dv[int64_t(j - j0) * hs + d];
    }
  }
}

// One (sequence, head): Dr, then key tiles in ascending order, then dq added into dqkv's q rows.
// dq_rows points at the head's q channels of row 0 in dqkv (rows 3C apart; k and v at +C and +2C).
template <typename Real>
void backward_head(HeadGrad<Real>& g, const Head<Real>& head, FlashTiles tiles, Real* dq_rows) {
  const int T = head.T, hs = head.hs;
  const int64_t C = g.C;
  for (int i = 0; i < T; ++i) g.Dr[i] = dot(g.dout + i * C, g.out + i * C, hs);
  std::fill(g.dq.begin(), g.dq.end(), Real(0));
  for (int j0 = 0; j0 < T; j0 += tiles.cols) {
    const int j1 = std::min(j0 + tiles.cols, T);
    Real* dk_rows = dq_rows + j0 * head.stride + C;
    backward_key_tile(g, head, j0, j1, tiles.rows, dk_rows, dk_rows + C);
  }
  for (int i = 0; i < T; ++i)
    for (int d = 0; d < hs; ++d) dq_rows[i * head.stride + d] += g.dq[int64_t(i) * hs + d];
}

}  // namespace

template <typename Real>
void flash_attention_forward(Real* out, Real* lse, const Real* qkv, int B, int T, int C, int NH,
                             const AttentionDropout* dropout, FlashTiles tiles) {
  const int hs = C / NH;
#pragma omp parallel
  {
    // One query tile's scratch per thread: o [Br, hs], and one row's key tile's scores [Bc] and P V [hs].
    std::vector<Real> o(int64_t(tiles.rows) * hs), s(tiles.cols), pv(hs);
#pragma omp for schedule(static)
    for (int bh = 0; bh < B * NH; ++bh) {
      const int b = bh / NH, h = bh % NH;
      const Head<Real> head = make_head(qkv, b, h, T, C, NH, dropout);
      for (int i0 = 0; i0 < T; i0 += tiles.rows) {
        const int i1 = std::min(i0 + tiles.rows, T);
        Real* out_rows = out + (int64_t(b) * T + i0) * C + int64_t(h) * hs;
        Real* lse_rows = lse + int64_t(bh) * T + i0;
        forward_query_tile(out_rows, lse_rows, head, i0, i1, C, tiles.cols, o.data(), s.data(), pv.data());
      }
    }
  }
}

template <typename Real>
void flash_attention_backward(Real* dqkv, const Real* dout, const Real* qkv, const Real* out, const Real* lse,
                              int B, int T, int C, int NH, const AttentionDropout* dropout,
                              FlashTiles tiles) {
  const int hs = C / NH;
#pragma omp parallel
  {
    HeadGrad<Real> g{nullptr, nullptr, nullptr, C};
    g.Dr.resize(T);
    g.dq.resize(int64_t(T) * hs);
    g.dk.resize(int64_t(tiles.cols) * hs);
    g.dv.resize(int64_t(tiles.cols) * hs);
    g.dq_part.resize(int64_t(tiles.rows) * hs);
    g.dk_part.resize(int64_t(tiles.cols) * hs);
    g.dv_part.resize(int64_t(tiles.cols) * hs);
#pragma omp for schedule(static)
    for (int bh = 0; bh < B * NH; ++bh) {
      const int b = bh / NH, h = bh % NH;
      const Head<Real> head = make_head(qkv, b, h, T, C, NH, dropout);
      const int64_t row0 = int64_t(b) * T * C + int64_t(h) * hs;  // the head's row 0 in dout and out
      g.dout = dout + row0;
      g.out = out + row0;
      g.lse = lse + int64_t(bh) * T;
      backward_head(g, head, tiles, dqkv + int64_t(b) * T * 3 * C + int64_t(h) * hs);
    }
  }
}

template void flash_attention_forward<float>(float*, float*, const float*, int, int, int, int,
                                             const AttentionDropout*, FlashTiles);
template void flash_attention_forward<double>(double*, double*, const double*, int, int, int, int,
                                              const AttentionDropout*, FlashTiles);
template void flash_attention_backward<float>(float*, const float*, const float*, const float*, const float*,
                                              int, int, int, int, const AttentionDropout*, FlashTiles);
template void flash_attention_backward<double>(double*, const double*, const double*, const double*,
                                               const double*, int, int, int, int, const AttentionDropout*,
                                               FlashTiles);

}  // namespace gpt::cpu
