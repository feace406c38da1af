// GPT-2's layers composed from the ops of the device seam; see layers.h for the math.
#include "model/layers.h"

#include <stdexcept>
#include <string>

#include "kernels/common/random.h"
#include "kernels/mixed_precision.h"
#include "model/params.h"

namespace gpt {
namespace {

// Active dropout in a block needs the block's index: without it every block would draw the same masks.
void check_layer(const GPTConfig& config, const Dropout& dropout, int layer) {
  if (dropout.active() && (layer < 0 || layer >= config.num_layers)) {
    throw std::invalid_argument("block with active dropout needs its layer index in [0, num_layers), got " +
                                std::to_string(layer));
  }
}

bool hidden_on(const Dropout& dropout) {
  return dropout.active() && dropout.hidden > 0;
}

// A view of the memory at p (gradients, in Real) or of weights (in the loop's compute dtype), with this
// shape, on the ops' device.
template <typename Real>
Tensor view(const Ops& ops, const Real* p, std::vector<int64_t> shape) {
  return Tensor{const_cast<Real*>(p), std::move(shape), dtype_of<Real>(), ops.device()};
}
Tensor view(const Ops& ops, WeightView w, std::vector<int64_t> shape) {
  return Tensor{const_cast<void*>(w.data), std::move(shape), w.dtype, ops.device()};
}

// Where this rank's part of each sequence of a residual-stream tensor x [B, T', C] begins among the
// sequence's elements: with sequence parallelism rank r holds positions [r T', (r+1) T').
int64_t sequence_offset(const TensorParallel& tp, const Tensor& x) {
  return tp.sequence_parallel ? int64_t(tp.rank()) * x.shape[1] * x.shape[2] : 0;
}

// Hidden dropout of x [B, T', C] in place at (layer, site), when it is on; masks keyed by global positions.
void drop_hidden(Ops& ops, const Dropout& dropout, int layer, DropoutSite site, const Tensor& x,
                 const TensorParallel& tp) {
  if (!hidden_on(dropout)) return;
  const std::vector<uint64_t> keys = dropout.keys(layer, site, int(x.shape[0]));
  ops.dropout_forward(x, x, DropoutMask{dropout.hidden, keys.data(), sequence_offset(tp, x)});
}

// The gradient into a hidden-dropout site's input given dout [B, ...]: dout itself when dropout is off, else
// mask * dout / (1-p) written to `buffer`.
const Tensor& hidden_gradient(Ops& ops, const Dropout& dropout, int layer, DropoutSite site,
                              const Tensor& dout, const Tensor& buffer, const TensorParallel& tp) {
  if (!hidden_on(dropout)) return dout;
  const std::vector<uint64_t> keys = dropout.keys(layer, site, int(dout.shape[0]));
  ops.dropout_backward(buffer, dout, DropoutMask{dropout.hidden, keys.data(), sequence_offset(tp, dout)});
  return buffer;
}

// The attention op's dropout at a layer, owning the per-sequence keys: null when attention dropout is off.
// att, the residual [B, NH', T, T] or [B, NH', T], is this rank's heads: with tensor parallelism rank r's
// begin at head r NH'. The masks are per probability whichever residual is kept, so rank r's first element
// is r NH' T T.
class AttentionMasks {
 public:
  AttentionMasks(const Dropout& dropout, int layer, const Tensor& att, const TensorParallel& tp) {
    if (dropout.active() && dropout.attention > 0)
      keys_ = dropout.keys(layer, DropoutSite::kAttentionProbs, int(att.shape[0]));
    const int64_t first_head = int64_t(tp.rank()) * att.shape[1], T = att.shape[2];
    mask_ = {dropout.attention, keys_.data(), first_head * T * T};
  }
  AttentionMasks(const AttentionMasks&) = delete;
  AttentionMasks& operator=(const AttentionMasks&) = delete;
  const DropoutMask* get() const { return keys_.empty() ? nullptr : &mask_; }

 private:
  std::vector<uint64_t> keys_;
  DropoutMask mask_;
};

// The block's LayerNorms and biases (or their gradients) as tensors of the ops' device.
struct SmallTensors {
  Tensor ln1_w, ln1_b, qkv_b, attn_proj_b, ln2_w, ln2_b, fc_b, fc_proj_b;
};
// On one of t tensor-parallel ranks (the column-parallel layers' biases are split).
template <typename Ptr>
SmallTensors small_tensors(const Ops& ops, const BlockParams<Ptr>& p, int C, int t) {
  const int64_t c = C, s = C / t;
  return {view(ops, p.ln1_w, {c}),       view(ops, p.ln1_b, {c}),    view(ops, p.qkv_b, {3 * s}),
          view(ops, p.attn_proj_b, {c}), view(ops, p.ln2_w, {c}),    view(ops, p.ln2_b, {c}),
          view(ops, p.fc_b, {4 * s}),    view(ops, p.fc_proj_b, {c})};
}

// A matrix's output and input widths: the last dimensions of a layer's output and input.
struct MatrixShape {
  int64_t out, in;
};
MatrixShape matrix_shape(const Tensor& out, const Tensor& x) {
  return {out.shape.back(), x.shape.back()};
}

// out = x W^T + b over the matrix's tiles in turn (untiled: the one linear op of the whole layer).
template <typename Real>
void tiled_linear_forward(Ops& ops, BlockWeights<Real>& w, BlockLinear linear, const Tensor& out,
                          const Tensor& x, const Tensor& bias) {
  const MatrixShape m = matrix_shape(out, x);
  const int N = w.tiles();
  if (N == 1) {
    ops.linear_forward(out, x, view(ops, w.matrix(linear, 0), {m.out, m.in}), bias);
    w.matrix_done(linear, 0);
    return;
  }
  const int64_t rows = m.out / N;
  for (int k = 0; k < N; ++k) {
    ops.linear_forward_columns(out, k * rows, x, view(ops, w.matrix(linear, k), {rows, m.in}),
                               bias.empty() ? Tensor{} : element_range(bias, k * rows, rows));
    w.matrix_done(linear, k);
  }
}

// fch = x Wfc^T + bfc and fch_gelu = GELU(fch): one op for the untiled matrix (a backend may apply GELU in
// the GEMM's epilogue); tiled, the tiles in turn and then GELU over the whole output.
template <typename Real>
void fc_gelu_forward(Ops& ops, BlockWeights<Real>& w, const Tensor& fch_gelu, const Tensor& fch,
                     const Tensor& x, const Tensor& bias) {
  if (w.tiles() > 1) {
    tiled_linear_forward(ops, w, BlockLinear::kFc, fch, x, bias);
    ops.gelu_forward(fch_gelu, fch);
    return;
  }
  const MatrixShape m = matrix_shape(fch, x);
  ops.linear_gelu_forward(fch_gelu, fch, x, view(ops, w.matrix(BlockLinear::kFc, 0), {m.out, m.in}), bias);
  w.matrix_done(BlockLinear::kFc, 0);
}

// The backward over the tiles in turn: each tile's weight and bias gradients equal the untiled layer's rows;
// dx is overwritten (the whole layer: linear_backward's own overwrite, no zeroing pass), or a sum over the
// tiles, zeroed and then added tile by tile.
template <typename Real>
void tiled_linear_backward(Ops& ops, BlockWeights<Real>& w, BlockLinear linear, const Tensor& dx,
                           const Tensor& dbias, const Tensor& dout, const Tensor& x) {
  const MatrixShape m = matrix_shape(dout, x);
  const int N = w.tiles();
  if (N == 1) {
    ops.linear_backward(dx, view(ops, w.matrix_gradient(linear, 0), {m.out, m.in}), dbias, dout, x,
                        view(ops, w.matrix(linear, 0), {m.out, m.in}));
    w.matrix_done(linear, 0);
    return;
  }
  const int64_t rows = m.out / N;
  ops.fill(dx, 0);
  for (int k = 0; k < N; ++k) {
    ops.linear_backward_columns(dx, view(ops, w.matrix_gradient(linear, k), {rows, m.in}),
                                dbias.empty() ? Tensor{} : element_range(dbias, k * rows, rows), dout,
                                k * rows, x, view(ops, w.matrix(linear, k), {rows, m.in}));
    w.matrix_done(linear, k);
  }
}

// Part b of x's leading dimension, flattened: a sequence of a [B, ...] tensor.
Tensor sequence(const Tensor& x, int64_t b) {
  const int64_t n = x.numel() / x.shape[0];
  return Tensor{static_cast<char*>(x.data) + b * int64_t(dtype_bytes(x.dtype, n)), {n}, x.dtype, x.device};
}

// Sequence parallelism: out [B,T,C] = each sequence's parts x [B,T/t,C] from the group, in rank order.
void gather_sequence(const TensorParallel& tp, const Tensor& out, const Tensor& x) {
  for (int64_t b = 0; b < x.shape[0]; ++b) tp.group->all_gather(sequence(out, b), sequence(x, b), tp.traffic);
}
// out [B,T/t,C] = this rank's part of each sequence of x [B,T,C] summed over the group.
void scatter_sequence(const TensorParallel& tp, const Tensor& out, const Tensor& x) {
  for (int64_t b = 0; b < x.shape[0]; ++b)
    tp.group->reduce_scatter(sequence(out, b), sequence(x, b), tp.traffic);
}

// A column-parallel layer's input: x, or with sequence parallelism x's positions gathered from the group
// (into tp.gathered).
const Tensor& full_sequence(const TensorParallel& tp, const Tensor& x) {
  if (!tp.sequence_parallel) return x;
  gather_sequence(tp, tp.gathered, x);
  return tp.gathered;
}

// Where a rank computes its partial of a sum over the group that lands in `out`: out itself, or with
// sequence parallelism (out holds this rank's positions) tp.partial, of whole sequences.
const Tensor& partial_buffer(const TensorParallel& tp, const Tensor& out) {
  return tp.sequence_parallel ? tp.partial : out;
}

// out = the group's sum of the partials in partial_buffer(tp, out): all-reduced in place, or with sequence
// parallelism reduce-scattered to this rank's positions. Nothing to do for t = 1.
void sum_over_group(const TensorParallel& tp, const Tensor& out, const Tensor& partial) {
  if (tp.sequence_parallel) {
    scatter_sequence(tp, out, partial);
  } else if (tp.size() > 1) {
    tp.group->all_reduce(out, tp.traffic);
  }
}

// A row-parallel layer: out = x W^T + b, the sum over the group of each rank's x (its features) times its
// columns of W; with sequence parallelism out is this rank's positions of the sum.
template <typename Real>
void row_parallel_forward(Ops& ops, BlockWeights<Real>& w, BlockLinear linear, const Tensor& out,
                          const Tensor& x, const Tensor& bias, const TensorParallel& tp) {
  const Tensor& partial = partial_buffer(tp, out);
  tiled_linear_forward(ops, w, linear, partial, x, tp.rank() == 0 ? bias : Tensor{});  // the bias once
  sum_over_group(tp, out, partial);
}

// A column-parallel layer's backward: dx = the group's sum of dout times each rank's rows of W (overwritten;
// this rank's positions with sequence parallelism, where x, the layer's input, is gathered again).
template <typename Real>
void column_parallel_backward(Ops& ops, BlockWeights<Real>& w, BlockLinear linear, const Tensor& dx,
                              const Tensor& dbias, const Tensor& dout, const Tensor& x,
                              const TensorParallel& tp) {
  const Tensor& partial = partial_buffer(tp, dx);
  tiled_linear_backward(ops, w, linear, partial, dbias, dout, full_sequence(tp, x));
  sum_over_group(tp, dx, partial);
}

// LayerNorm's backward. With sequence parallelism the parameter gradients of this rank's positions are
// summed over the group before they join the unit's gradient (every rank then holds the same).
void norm_backward(Ops& ops, const TensorParallel& tp, const Tensor& dx, const Tensor& dw, const Tensor& db,
                   const Tensor& dout, const Tensor& x, const Tensor& w, const Tensor& mean,
                   const Tensor& rstd) {
  if (!tp.sequence_parallel) {
    ops.layernorm_backward(dx, dw, db, dout, x, w, mean, rstd);
    return;
  }
  const Tensor dw_part = sequence(tp.norm_grads, 0), db_part = sequence(tp.norm_grads, 1);
  ops.fill(tp.norm_grads, 0);
  ops.layernorm_backward(dx, dw_part, db_part, dout, x, w, mean, rstd);
  tp.group->all_reduce(tp.norm_grads, tp.traffic);
  ops.add_into(dw, dw_part);
  ops.add_into(db, db_part);
}

// LayerNorm of the residual stream x; with an addend (the previous block's residual2, x its kPending
// output), x = addend + x first, in the same op: the sum is written back into x and normalized.
void layernorm_of_sum(Ops& ops, const Tensor& x, const Tensor& out, const Tensor& mean, const Tensor& rstd,
                      const Tensor& addend, const Tensor& w, const Tensor& b) {
  if (addend.empty()) {
    ops.layernorm_forward(out, mean, rstd, x, w, b);
  } else {
    ops.residual_layernorm_forward(x, out, mean, rstd, addend, x, w, b);
  }
}

// x's memory seen with another shape of as many elements.
Tensor reshaped(const Tensor& x, std::vector<int64_t> shape) {
  return Tensor{x.data, std::move(shape), x.dtype, x.device};
}

size_t bytes_of(std::initializer_list<const Tensor*> tensors) {
  size_t total = 0;
  for (const Tensor* t : tensors) total += t->nbytes();
  return total;
}

Tensor allocate(Arena& arena, DType dtype, std::vector<int64_t> shape) {
  return arena.allocate_tensor("activation", "activations", std::move(shape), dtype);
}

}  // namespace

uint64_t dropout_key(uint64_t seed, int64_t window, int layer, DropoutSite site) {
  constexpr uint64_t kDomain = 0x64726F706F7574ULL;  // "dropout"
  uint64_t key = random::derive_key(seed, kDomain);
  key = random::derive_key(key, static_cast<uint64_t>(window));
  key = random::derive_key(key, static_cast<uint64_t>(int64_t(layer)));
  return random::derive_key(key, static_cast<uint64_t>(site));
}

std::vector<uint64_t> Dropout::keys(int layer, DropoutSite site, int B) const {
  std::vector<uint64_t> out(B);
  for (int b = 0; b < B; ++b) out[b] = dropout_key(seed, windows[b], layer, site);
  return out;
}

void BlockActivations::allocate(Arena& arena, DType dtype, const GPTConfig& config, int B, int T,
                                bool own_probs, const TensorParallel& tp, AttentionResidual residual) {
  const int64_t C = config.hidden, t = tp.size(), Tl = tp.local_positions(T), BTl = int64_t(B) * Tl;
  for (Tensor* x : {&ln1, &residual2, &ln2}) *x = gpt::allocate(arena, dtype, {B, Tl, C});
  for (Tensor* x : {&ln1_mean, &ln1_rstd, &ln2_mean, &ln2_rstd})
    *x = gpt::allocate(arena, statistics_dtype(dtype), {BTl});
  atty = gpt::allocate(arena, dtype, {B, T, C / t});
  qkv = gpt::allocate(arena, dtype, {B, T, 3 * C / t});
  owns_probs = own_probs;
  if (own_probs) {
    const int64_t NH = config.heads / t;
    att = residual == AttentionResidual::kLogSumExp
              ? gpt::allocate(arena, statistics_dtype(dtype), {B, NH, T})
              : gpt::allocate(arena, dtype, {B, NH, T, T});
  }
  fch = gpt::allocate(arena, dtype, {B, T, 4 * C / t});
  fch_gelu = gpt::allocate(arena, dtype, {B, T, 4 * C / t});
}

size_t BlockActivations::bytes() const {
  return bytes_of({&ln1, &ln1_mean, &ln1_rstd, &qkv, &atty, &residual2, &ln2, &ln2_mean, &ln2_rstd, &fch,
                   &fch_gelu}) +
         (owns_probs ? att.nbytes() : 0);
}

void BlockScratch::allocate(Arena& arena, DType dtype, const GPTConfig& config, int B, int T,
                            const TensorParallel& tp) {
  const int64_t C = config.hidden, t = tp.size(), Tl = tp.local_positions(T);
  d_fch_gelu = gpt::allocate(arena, dtype, {B, T, 4 * C / t});
  d_fch = gpt::allocate(arena, dtype, {B, T, 4 * C / t});
  for (Tensor* x : {&d_ln2, &d_ln1}) *x = gpt::allocate(arena, dtype, {B, Tl, C});
  d_atty = gpt::allocate(arena, dtype, {B, T, C / t});
  d_qkv = gpt::allocate(arena, dtype, {B, T, 3 * C / t});
}

size_t BlockScratch::bytes() const {
  return bytes_of({&d_fch_gelu, &d_fch, &d_ln2, &d_atty, &d_ln1, &d_qkv});
}

void HeadActivations::allocate(Arena& arena, DType dtype, const GPTConfig& config, int B, int T,
                               const TensorParallel& tp, int64_t classifier_rows) {
  const int64_t t = tp.size(), C = config.hidden, BT = int64_t(B) * T, Tl = tp.local_positions(T),
                BTl = B * Tl;
  lnf = gpt::allocate(arena, dtype, {B, Tl, C});
  dlnf = gpt::allocate(arena, dtype, {B, Tl, C});
  const DType statistics = statistics_dtype(dtype);
  lnf_mean = gpt::allocate(arena, statistics, {BTl});
  lnf_rstd = gpt::allocate(arena, statistics, {BTl});
  if (classifier_rows > 0) {
    if (t > 1) throw std::invalid_argument("the fused classifier is not vocabulary-parallel");
    logits_chunk = gpt::allocate(arena, dtype, {classifier_rows, config.padded_vocab()});
  } else {
    probs = gpt::allocate(arena, dtype, {BT, config.padded_vocab() / t});
  }
  losses = gpt::allocate(arena, statistics, {BT});
  dlosses = gpt::allocate(arena, statistics, {BT});
  if (t > 1) {
    stats = gpt::allocate(arena, statistics, {BT, 3});
    stats_all = gpt::allocate(arena, statistics, {t, BT, 3});
  }
  if (tp.sequence_parallel) lnf_full = gpt::allocate(arena, dtype, {B, T, C});
}

void HeadActivations::allocate_probs(Arena& arena, DType dtype, const GPTConfig& config, int B, int T) {
  probs = gpt::allocate(arena, dtype, {int64_t(B) * T, config.padded_vocab()});
}

size_t HeadActivations::bytes() const {
  size_t total = bytes_of({&lnf, &dlnf, &lnf_mean, &lnf_rstd, &losses, &dlosses});
  for (const Tensor* x : {&probs, &logits_chunk, &stats, &stats_all, &lnf_full})
    total += x->data ? x->nbytes() : 0;
  return total;
}

void embed_forward(Ops& ops, const GPTConfig& config, WeightView wte, WeightView wpe, const Tensor& tokens,
                   const Tensor& x0, const Dropout& dropout, const TensorParallel& tp) {
  const int64_t C = config.hidden, rows = config.padded_vocab() / tp.size();
  const Tensor positions = view(ops, wpe, {config.max_positions, C});
  if (tp.size() == 1) {
    ops.embedding_forward(x0, tokens, view(ops, wte, {rows, C}), positions);
  } else {
    // The vocabulary-parallel embedding: each rank looks up the tokens of its rows (the positions on rank 0
    // only), and the group sums.
    const Tensor& partial = partial_buffer(tp, x0);
    ops.embedding_forward_rows(partial, tokens, view(ops, wte, {rows, C}), tp.rank() * rows,
                               tp.rank() == 0 ? positions : Tensor{});
    sum_over_group(tp, x0, partial);
  }
  drop_hidden(ops, dropout, kEmbeddingLayer, DropoutSite::kEmbedding, x0, tp);
}

template <typename Real>
void embed_backward(Ops& ops, const GPTConfig& config, Real* dwte, Real* dwpe, const Tensor& tokens,
                    const Tensor& dx0, const Tensor& scratch, const Dropout& dropout,
                    const TensorParallel& tp) {
  const int64_t C = config.hidden, rows = config.padded_vocab() / tp.size();
  const Tensor& d_embedding =
      hidden_gradient(ops, dropout, kEmbeddingLayer, DropoutSite::kEmbedding, dx0, scratch, tp);
  const Tensor dpositions = dwpe ? view(ops, dwpe, {config.max_positions, C}) : Tensor{};
  if (tp.size() == 1) {
    ops.embedding_backward(view(ops, dwte, {rows, C}), dpositions, d_embedding, tokens);
    return;
  }
  // Every rank sees the whole gradient: its rows of wte take their tokens', and wpe's is the same on all.
  ops.embedding_backward_rows(view(ops, dwte, {rows, C}), tp.rank() * rows, dpositions,
                              full_sequence(tp, d_embedding), tokens);
}

template <typename Real>
WholeBlock<Real>::WholeBlock(WeightView weights, Real* grads, int C, int t)
    : w_(block_params(weights, C, t)) {
  if (grads) g_ = block_params(grads, C, t);  // a forward has none
}

template <typename Real>
WeightView WholeBlock<Real>::matrix(BlockLinear linear, int) {
  const WeightView matrices[] = {w_.qkv_w, w_.attn_proj_w, w_.fc_w, w_.fc_proj_w};
  return matrices[int(linear)];
}

template <typename Real>
Real* WholeBlock<Real>::matrix_gradient(BlockLinear linear, int) {
  Real* const matrices[] = {g_.qkv_w, g_.attn_proj_w, g_.fc_w, g_.fc_proj_w};
  return matrices[int(linear)];
}

template <typename Real>
void block_forward(Ops& ops, const GPTConfig& config, BlockWeights<Real>& weights, const Tensor& x_in,
                   const Tensor& x_out, BlockActivations& a, const Dropout& dropout, int layer,
                   BlockOutput output, const TensorParallel& tp, const Tensor& x_in_addend) {
  check_layer(config, dropout, layer);
  const SmallTensors w = small_tensors(ops, weights.small(), config.hidden, tp.size());
  layernorm_of_sum(ops, x_in, a.ln1, a.ln1_mean, a.ln1_rstd, x_in_addend, w.ln1_w, w.ln1_b);
  tiled_linear_forward(ops, weights, BlockLinear::kQkv, a.qkv, full_sequence(tp, a.ln1), w.qkv_b);
  const AttentionMasks attention_masks(dropout, layer, a.att, tp);
  ops.attention_forward(a.atty, a.att, a.qkv, attention_masks.get());
  // The attention projection lands in x_out first (dropped there), then becomes the residual sum
  // r2 = x + drop(proj), which LayerNorm 2 reads in the same op.
  row_parallel_forward(ops, weights, BlockLinear::kAttnProj, x_out, a.atty, w.attn_proj_b, tp);
  drop_hidden(ops, dropout, layer, DropoutSite::kAttentionOutput, x_out, tp);
  ops.residual_layernorm_forward(a.residual2, a.ln2, a.ln2_mean, a.ln2_rstd, x_in, x_out, w.ln2_w, w.ln2_b);
  fc_gelu_forward(ops, weights, a.fch_gelu, a.fch, full_sequence(tp, a.ln2), w.fc_b);
  if (output == BlockOutput::kNone) return;
  row_parallel_forward(ops, weights, BlockLinear::kFcProj, x_out, a.fch_gelu, w.fc_proj_b, tp);
  drop_hidden(ops, dropout, layer, DropoutSite::kMlpOutput, x_out, tp);
  if (output == BlockOutput::kSum) ops.add(x_out, a.residual2, x_out);
}

void block_forward(Ops& ops, const GPTConfig& config, WeightView weights, const Tensor& x_in,
                   const Tensor& x_out, BlockActivations& acts, const Dropout& dropout, int layer) {
  WholeBlock<float> whole(weights, nullptr, config.hidden);  // a forward: no gradients, whatever their dtype
  block_forward(ops, config, whole, x_in, x_out, acts, dropout, layer);
}

void DecodeActivations::allocate(Arena& arena, DType dtype, const GPTConfig& config) {
  const int64_t C = config.hidden;
  for (Tensor* row : {&ln1, &atty, &residual2, &ln2}) *row = gpt::allocate(arena, dtype, {1, C});
  for (Tensor* stat : {&ln1_mean, &ln1_rstd, &ln2_mean, &ln2_rstd})
    *stat = gpt::allocate(arena, statistics_dtype(dtype), {1});
  fch = gpt::allocate(arena, dtype, {1, 4 * C});
  fch_gelu = gpt::allocate(arena, dtype, {1, 4 * C});
  att = gpt::allocate(arena, dtype, {config.heads, config.max_positions});
}

void block_decode(Ops& ops, const GPTConfig& config, WeightView weights, const Tensor& x_in,
                  const Tensor& x_out, DecodeActivations& a, const Tensor& qkv_cache, int pos) {
  const BlockParams<WeightView> p = block_params(weights, config.hidden);
  const SmallTensors w = small_tensors(ops, p, config.hidden, 1);
  const int64_t C = config.hidden, C3 = 3 * C;
  const Tensor rows = row_range(qkv_cache, 0, pos + 1);  // this token's row and the earlier ones
  const Tensor row = row_range(qkv_cache, pos, 1);
  ops.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x_in, w.ln1_w, w.ln1_b);
  ops.linear_forward(row, a.ln1, view(ops, p.qkv_w, {C3, C}), w.qkv_b);
  ops.attention_decode(a.atty, Tensor{a.att.data, {config.heads, pos + 1}, a.att.dtype, a.att.device}, rows);
  ops.linear_forward(x_out, a.atty, view(ops, p.attn_proj_w, {C, C}), w.attn_proj_b);
  ops.residual_layernorm_forward(a.residual2, a.ln2, a.ln2_mean, a.ln2_rstd, x_in, x_out, w.ln2_w, w.ln2_b);
  ops.linear_forward(a.fch, a.ln2, view(ops, p.fc_w, {4 * C, C}), w.fc_b);
  ops.gelu_forward(a.fch_gelu, a.fch);
  ops.linear_forward(x_out, a.fch_gelu, view(ops, p.fc_proj_w, {C, 4 * C}), w.fc_proj_b);
  ops.add(x_out, a.residual2, x_out);
}

template <typename Real>
void block_backward(Ops& ops, const GPTConfig& config, BlockWeights<Real>& weights, const Tensor& x_in,
                    const BlockActivations& a, BlockScratch& s, const Tensor& dresidual,
                    const Dropout& dropout, int layer, bool recompute_attention, const TensorParallel& tp) {
  check_layer(config, dropout, layer);
  const int C = config.hidden;
  const SmallTensors w = small_tensors(ops, weights.small(), C, tp.size());
  const SmallTensors g = small_tensors(ops, weights.small_gradients(), C, tp.size());
  // dresidual = dL/d(out) = dL/d(r2) through the skip connection, and dL/d(dropped MLP output). The MLP
  // output's gradient, mask * dresidual / (1-p), borrows d_ln2, which is free until fc's backward below.
  const Tensor& d_mlp_out =
      hidden_gradient(ops, dropout, layer, DropoutSite::kMlpOutput, dresidual, s.d_ln2, tp);
  tiled_linear_backward(ops, weights, BlockLinear::kFcProj, s.d_fch_gelu, g.fc_proj_b,
                        full_sequence(tp, d_mlp_out), a.fch_gelu);
  ops.gelu_backward(s.d_fch, a.fch, s.d_fch_gelu);
  column_parallel_backward(ops, weights, BlockLinear::kFc, s.d_ln2, g.fc_b, s.d_fch, a.ln2, tp);
  // LayerNorm 2's input gradient joins the skip path: dresidual becomes dL/d(r2).
  norm_backward(ops, tp, dresidual, g.ln2_w, g.ln2_b, s.d_ln2, a.residual2, w.ln2_w, a.ln2_mean, a.ln2_rstd);
  // dL/d(r2) is also dL/d(dropped attention projection output); the projection's own gradient borrows d_ln1,
  // which is free until qkv's backward.
  const Tensor& d_attn_out =
      hidden_gradient(ops, dropout, layer, DropoutSite::kAttentionOutput, dresidual, s.d_ln1, tp);
  tiled_linear_backward(ops, weights, BlockLinear::kAttnProj, s.d_atty, g.attn_proj_b,
                        full_sequence(tp, d_attn_out), a.atty);
  const AttentionMasks attention_masks(dropout, layer, a.att, tp);
  if (recompute_attention) {
    // Selective recomputation: the attention core again, from the kept qkv with the same masks, rewriting
    // the shared residual (probabilities or log-sum-exp). Its output equals the kept atty; it lands in d_ln1
    // (as many elements), free between the projection's backward and qkv's.
    ops.attention_forward(reshaped(s.d_ln1, a.atty.shape), a.att, a.qkv, attention_masks.get());
  }
  // atty is the forward's output, kept either way (a log-sum-exp backward reads it; the others ignore it).
  ops.attention_backward(s.d_qkv, s.d_atty, a.qkv, a.atty, a.att, attention_masks.get());
  column_parallel_backward(ops, weights, BlockLinear::kQkv, s.d_ln1, g.qkv_b, s.d_qkv, a.ln1, tp);
  // LayerNorm 1's input gradient joins the skip path: dresidual becomes dL/d(x_in).
  norm_backward(ops, tp, dresidual, g.ln1_w, g.ln1_b, s.d_ln1, x_in, w.ln1_w, a.ln1_mean, a.ln1_rstd);
}

double head_forward(Ops& ops, const GPTConfig& config, WeightView lnf_w, WeightView lnf_b, WeightView wte,
                    const Tensor& x, const Tensor& targets, HeadActivations& a, const TensorParallel& tp,
                    const Tensor& x_addend) {
  const int64_t C = config.hidden, rows = config.padded_vocab() / tp.size();
  layernorm_of_sum(ops, x, a.lnf, a.lnf_mean, a.lnf_rstd, x_addend, view(ops, lnf_w, {C}),
                   view(ops, lnf_b, {C}));
  if (a.fused() && !targets.empty()) {
    // Chunk by chunk: the losses only; the backward recomputes each chunk's logits.
    ops.classifier_forward(a.losses, a.lnf, view(ops, wte, {rows, C}), targets, config.vocab, a.logits_chunk);
    return ops.sum(a.losses) / double(a.losses.numel());
  }
  if (a.probs.empty()) throw std::logic_error("head_forward: the fused head's logits need probs allocated");
  if (tp.sequence_parallel) gather_sequence(tp, a.lnf_full, a.lnf);  // kept for the backward's dwte
  ops.linear_forward(a.probs, tp.sequence_parallel ? a.lnf_full : a.lnf, view(ops, wte, {rows, C}), Tensor{});
  if (tp.size() == 1) {
    if (targets.empty()) return 0;
    ops.cross_entropy_forward(a.losses, a.probs, a.probs, targets, config.vocab);
  } else {
    if (targets.empty()) throw std::invalid_argument("the vocabulary-parallel head needs targets");
    // Each rank's softmax statistics over its columns, merged from the whole group's.
    const int64_t first = tp.rank() * rows;
    ops.cross_entropy_stats(a.stats, a.probs, targets, first, config.vocab);
    tp.group->all_gather(a.stats_all, a.stats, tp.traffic);
    ops.cross_entropy_merge(a.losses, a.probs, a.probs, a.stats_all, first, config.vocab);
  }
  // Summed in double so the mean does not depend on the summation order's rounding more than necessary.
  return ops.sum(a.losses) / double(a.losses.numel());
}

template <typename Real>
void head_backward(Ops& ops, const GPTConfig& config, WeightView lnf_w, WeightView wte, Real* dlnf_w,
                   Real* dlnf_b, Real* dwte, const Tensor& x, const Tensor& targets, HeadActivations& a,
                   Real dloss_per_token, const Tensor& dx, const TensorParallel& tp) {
  const int64_t C = config.hidden, rows = config.padded_vocab() / tp.size();
  ops.fill(a.dlosses, double(dloss_per_token));
  if (a.fused()) {
    // Each chunk's logits recomputed, dlogits in their place, dlnf written and dwte accumulated.
    ops.classifier_backward(a.dlnf, view(ops, dwte, {rows, C}), a.losses, a.lnf, view(ops, wte, {rows, C}),
                            targets, a.dlosses, config.vocab, a.logits_chunk);
  } else {
    // dlogits overwrite the probabilities in place.
    if (tp.size() == 1) {
      ops.cross_entropy_backward(a.probs, a.probs, targets, a.dlosses, config.vocab);
    } else {
      ops.cross_entropy_backward_columns(a.probs, a.probs, targets, a.dlosses, tp.rank() * rows,
                                         config.vocab);
    }
    // The tied projection is column-parallel over the vocabulary: dlnf sums the group's partial products.
    const Tensor& dlnf = partial_buffer(tp, a.dlnf);
    ops.linear_backward(dlnf, view(ops, dwte, {rows, C}), Tensor{}, a.probs,
                        tp.sequence_parallel ? a.lnf_full : a.lnf, view(ops, wte, {rows, C}));
    sum_over_group(tp, a.dlnf, dlnf);
  }
  ops.fill(dx, 0);
  norm_backward(ops, tp, dx, view(ops, dlnf_w, {C}), view(ops, dlnf_b, {C}), a.dlnf, x, view(ops, lnf_w, {C}),
                a.lnf_mean, a.lnf_rstd);
}

#define GPT_INSTANTIATE_LAYERS(Real)                                                                        \
  template void embed_backward<Real>(Ops&, const GPTConfig&, Real*, Real*, const Tensor&, const Tensor&,    \
                                     const Tensor&, const Dropout&, const TensorParallel&);                 \
  template class WholeBlock<Real>;                                                                          \
  template void block_forward<Real>(Ops&, const GPTConfig&, BlockWeights<Real>&, const Tensor&,             \
                                    const Tensor&, BlockActivations&, const Dropout&, int, BlockOutput,     \
                                    const TensorParallel&, const Tensor&);                                  \
  template void block_backward<Real>(Ops&, const GPTConfig&, BlockWeights<Real>&, const Tensor&,            \
                                     const BlockActivations&, BlockScratch&, const Tensor&, const Dropout&, \
                                     int, bool, const TensorParallel&);                                     \
  template void head_backward<Real>(Ops&, const GPTConfig&, WeightView, WeightView, Real*, Real*, Real*,    \
                                    const Tensor&, const Tensor&, HeadActivations&, Real, const Tensor&,    \
                                    const TensorParallel&);

GPT_INSTANTIATE_LAYERS(float)
GPT_INSTANTIATE_LAYERS(double)

}  // namespace gpt
