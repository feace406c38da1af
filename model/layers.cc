// GPT-2's layers composed from the ops of the device seam; see layers.h for the math.
#include "model/layers.h"

#include <stdexcept>
#include <string>

#include "kernels/common/random.h"
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

// A view of the memory at p, with this shape, on the ops' device.
template <typename Real>
Tensor view(const Ops& ops, const Real* p, std::vector<int64_t> shape) {
  return Tensor{const_cast<Real*>(p), std::move(shape), dtype_of<Real>(), ops.device()};
}

// Hidden dropout of x [B, ...] in place at (layer, site), when it is on.
void drop_hidden(Ops& ops, const Dropout& dropout, int layer, DropoutSite site, const Tensor& x) {
  if (!hidden_on(dropout)) return;
  const std::vector<uint64_t> keys = dropout.keys(layer, site, int(x.shape[0]));
  ops.dropout_forward(x, x, DropoutMask{dropout.hidden, keys.data()});
}

// The gradient into a hidden-dropout site's input given dout [B, ...]: dout itself when dropout is off, else
// mask * dout / (1-p) written to `buffer`.
const Tensor& hidden_gradient(Ops& ops, const Dropout& dropout, int layer, DropoutSite site,
                              const Tensor& dout, const Tensor& buffer) {
  if (!hidden_on(dropout)) return dout;
  const std::vector<uint64_t> keys = dropout.keys(layer, site, int(dout.shape[0]));
  ops.dropout_backward(buffer, dout, DropoutMask{dropout.hidden, keys.data()});
  return buffer;
}

// The attention op's dropout at a layer, owning the per-sequence keys: null when attention dropout is off.
class AttentionMasks {
 public:
  AttentionMasks(const Dropout& dropout, int layer, int B) {
    if (dropout.active() && dropout.attention > 0)
      keys_ = dropout.keys(layer, DropoutSite::kAttentionProbs, B);
    mask_ = {dropout.attention, keys_.data()};
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
template <typename Real>
SmallTensors small_tensors(const Ops& ops, const BlockParams<Real>& p, int C) {
  const int64_t c = C;
  return {view(ops, p.ln1_w, {c}),       view(ops, p.ln1_b, {c}),    view(ops, p.qkv_b, {3 * c}),
          view(ops, p.attn_proj_b, {c}), view(ops, p.ln2_w, {c}),    view(ops, p.ln2_b, {c}),
          view(ops, p.fc_b, {4 * c}),    view(ops, p.fc_proj_b, {c})};
}

// A matrix's output and input widths.
struct MatrixShape {
  int64_t out, in;
};
MatrixShape matrix_shape(BlockLinear linear, int64_t C) {
  switch (linear) {
    case BlockLinear::kQkv:
      return {3 * C, C};
    case BlockLinear::kAttnProj:
      return {C, C};
    case BlockLinear::kFc:
      return {4 * C, C};
    case BlockLinear::kFcProj:
      return {C, 4 * C};
  }
  return {0, 0};
}

// out = x W^T + b over the matrix's tiles in turn (untiled: the one linear op of the whole layer).
template <typename Real>
void tiled_linear_forward(Ops& ops, BlockWeights<Real>& w, BlockLinear linear, int C, const Tensor& out,
                          const Tensor& x, const Tensor& bias) {
  const MatrixShape m = matrix_shape(linear, C);
  const int N = w.tiles();
  if (N == 1) {
    ops.linear_forward(out, x, view(ops, w.matrix(linear, 0), {m.out, m.in}), bias);
    w.matrix_done(linear, 0);
    return;
  }
  const int64_t rows = m.out / N;
  const Real* b = static_cast<const Real*>(bias.data);
  for (int k = 0; k < N; ++k) {
    ops.linear_forward_columns(out, k * rows, x, view(ops, w.matrix(linear, k), {rows, m.in}),
                               view(ops, b + k * rows, {rows}));
    w.matrix_done(linear, k);
  }
}

// The backward over the tiles in turn: each tile's weight and bias gradients equal the untiled layer's rows;
// dx, a sum over the tiles, is added tile by tile.
template <typename Real>
void tiled_linear_backward(Ops& ops, BlockWeights<Real>& w, BlockLinear linear, int C, const Tensor& dx,
                           const Tensor& dbias, const Tensor& dout, const Tensor& x) {
  const MatrixShape m = matrix_shape(linear, C);
  const int N = w.tiles();
  if (N == 1) {
    ops.linear_backward(dx, view(ops, w.matrix_gradient(linear, 0), {m.out, m.in}), dbias, dout, x,
                        view(ops, w.matrix(linear, 0), {m.out, m.in}));
    w.matrix_done(linear, 0);
    return;
  }
  const int64_t rows = m.out / N;
  const Real* db = static_cast<const Real*>(dbias.data);
  for (int k = 0; k < N; ++k) {
    ops.linear_backward_columns(dx, view(ops, w.matrix_gradient(linear, k), {rows, m.in}),
                                view(ops, db + k * rows, {rows}), dout, k * rows, x,
                                view(ops, w.matrix(linear, k), {rows, m.in}));
    w.matrix_done(linear, k);
  }
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

void BlockActivations::allocate(Arena& arena, DType dtype, const GPTConfig& config, int B, int T) {
  const int64_t C = config.hidden, BT = int64_t(B) * T;
  for (Tensor* t : {&ln1, &atty, &residual2, &ln2}) *t = gpt::allocate(arena, dtype, {B, T, C});
  for (Tensor* t : {&ln1_mean, &ln1_rstd, &ln2_mean, &ln2_rstd}) *t = gpt::allocate(arena, dtype, {BT});
  qkv = gpt::allocate(arena, dtype, {B, T, 3 * C});
  att = gpt::allocate(arena, dtype, {B, config.heads, T, T});
  fch = gpt::allocate(arena, dtype, {B, T, 4 * C});
  fch_gelu = gpt::allocate(arena, dtype, {B, T, 4 * C});
}

size_t BlockActivations::bytes() const {
  return bytes_of({&ln1, &ln1_mean, &ln1_rstd, &qkv, &att, &atty, &residual2, &ln2, &ln2_mean, &ln2_rstd,
                   &fch, &fch_gelu});
}

void BlockScratch::allocate(Arena& arena, DType dtype, const GPTConfig& config, int B, int T) {
  const int64_t C = config.hidden;
  d_fch_gelu = gpt::allocate(arena, dtype, {B, T, 4 * C});
  d_fch = gpt::allocate(arena, dtype, {B, T, 4 * C});
  for (Tensor* t : {&d_ln2, &d_atty, &d_ln1}) *t = gpt::allocate(arena, dtype, {B, T, C});
  d_qkv = gpt::allocate(arena, dtype, {B, T, 3 * C});
}

size_t BlockScratch::bytes() const {
  return bytes_of({&d_fch_gelu, &d_fch, &d_ln2, &d_atty, &d_ln1, &d_qkv});
}

void HeadActivations::allocate(Arena& arena, DType dtype, const GPTConfig& config, int B, int T) {
  const int64_t BT = int64_t(B) * T;
  lnf = gpt::allocate(arena, dtype, {B, T, config.hidden});
  dlnf = gpt::allocate(arena, dtype, {B, T, config.hidden});
  lnf_mean = gpt::allocate(arena, dtype, {BT});
  lnf_rstd = gpt::allocate(arena, dtype, {BT});
  probs = gpt::allocate(arena, dtype, {BT, config.padded_vocab()});
  losses = gpt::allocate(arena, dtype, {BT});
  dlosses = gpt::allocate(arena, dtype, {BT});
}

size_t HeadActivations::bytes() const {
  return bytes_of({&lnf, &dlnf, &lnf_mean, &lnf_rstd, &probs, &losses, &dlosses});
}

template <typename Real>
void embed_forward(Ops& ops, const GPTConfig& config, const Real* wte, const Real* wpe, const Tensor& tokens,
                   const Tensor& x0, const Dropout& dropout) {
  const int64_t C = config.hidden;
  ops.embedding_forward(x0, tokens, view(ops, wte, {config.padded_vocab(), C}),
                        view(ops, wpe, {config.max_positions, C}));
  drop_hidden(ops, dropout, kEmbeddingLayer, DropoutSite::kEmbedding, x0);
}

template <typename Real>
void embed_backward(Ops& ops, const GPTConfig& config, Real* dwte, Real* dwpe, const Tensor& tokens,
                    const Tensor& dx0, const Tensor& scratch, const Dropout& dropout) {
  const int64_t C = config.hidden;
  const Tensor& d_embedding =
      hidden_gradient(ops, dropout, kEmbeddingLayer, DropoutSite::kEmbedding, dx0, scratch);
  ops.embedding_backward(view(ops, dwte, {config.padded_vocab(), C}),
                         view(ops, dwpe, {config.max_positions, C}), d_embedding, tokens);
}

template <typename Real>
WholeBlock<Real>::WholeBlock(const Real* weights, Real* grads, int C) : w_(block_params(weights, C)) {
  if (grads) g_ = block_params(grads, C);  // a forward has none
}

template <typename Real>
const Real* WholeBlock<Real>::matrix(BlockLinear linear, int) {
  const Real* const matrices[] = {w_.qkv_w, w_.attn_proj_w, w_.fc_w, w_.fc_proj_w};
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
                   bool need_output) {
  check_layer(config, dropout, layer);
  const int C = config.hidden;
  const SmallTensors w = small_tensors(ops, weights.small(), C);
  ops.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x_in, w.ln1_w, w.ln1_b);
  tiled_linear_forward(ops, weights, BlockLinear::kQkv, C, a.qkv, a.ln1, w.qkv_b);
  const AttentionMasks attention_masks(dropout, layer, int(x_in.shape[0]));
  ops.attention_forward(a.atty, a.att, a.qkv, attention_masks.get());
  // The attention projection lands in x_out first (dropped there), then becomes the residual sum
  // r2 = x + drop(proj).
  tiled_linear_forward(ops, weights, BlockLinear::kAttnProj, C, x_out, a.atty, w.attn_proj_b);
  drop_hidden(ops, dropout, layer, DropoutSite::kAttentionOutput, x_out);
  ops.add(a.residual2, x_in, x_out);
  ops.layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.residual2, w.ln2_w, w.ln2_b);
  tiled_linear_forward(ops, weights, BlockLinear::kFc, C, a.fch, a.ln2, w.fc_b);
  ops.gelu_forward(a.fch_gelu, a.fch);
  if (!need_output) return;
  tiled_linear_forward(ops, weights, BlockLinear::kFcProj, C, x_out, a.fch_gelu, w.fc_proj_b);
  drop_hidden(ops, dropout, layer, DropoutSite::kMlpOutput, x_out);
  ops.add(x_out, a.residual2, x_out);
}

template <typename Real>
void block_forward(Ops& ops, const GPTConfig& config, const Real* weights, const Tensor& x_in,
                   const Tensor& x_out, BlockActivations& acts, const Dropout& dropout, int layer) {
  WholeBlock<Real> whole(weights, nullptr, config.hidden);
  block_forward(ops, config, whole, x_in, x_out, acts, dropout, layer);
}

void DecodeActivations::allocate(Arena& arena, DType dtype, const GPTConfig& config) {
  const int64_t C = config.hidden;
  for (Tensor* row : {&ln1, &atty, &residual2, &ln2}) *row = gpt::allocate(arena, dtype, {1, C});
  for (Tensor* stat : {&ln1_mean, &ln1_rstd, &ln2_mean, &ln2_rstd}) *stat = gpt::allocate(arena, dtype, {1});
  fch = gpt::allocate(arena, dtype, {1, 4 * C});
  fch_gelu = gpt::allocate(arena, dtype, {1, 4 * C});
  att = gpt::allocate(arena, dtype, {config.heads, config.max_positions});
}

template <typename Real>
void block_decode(Ops& ops, const GPTConfig& config, const Real* weights, const Tensor& x_in,
                  const Tensor& x_out, DecodeActivations& a, const Tensor& qkv_cache, int pos) {
  const BlockParams<const Real*> p = block_params(weights, config.hidden);
  const SmallTensors w = small_tensors(ops, p, config.hidden);
  const int64_t C = config.hidden, C3 = 3 * C;
  const Real* cache = static_cast<const Real*>(qkv_cache.data);
  const Tensor rows = view(ops, cache, {pos + 1, C3});  // this token's row and the earlier ones
  const Tensor row = view(ops, cache + pos * C3, {1, C3});
  ops.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x_in, w.ln1_w, w.ln1_b);
  ops.linear_forward(row, a.ln1, view(ops, p.qkv_w, {C3, C}), w.qkv_b);
  ops.attention_decode(a.atty, view(ops, static_cast<const Real*>(a.att.data), {config.heads, pos + 1}),
                       rows);
  ops.linear_forward(x_out, a.atty, view(ops, p.attn_proj_w, {C, C}), w.attn_proj_b);
  ops.add(a.residual2, x_in, x_out);
  ops.layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.residual2, w.ln2_w, w.ln2_b);
  ops.linear_forward(a.fch, a.ln2, view(ops, p.fc_w, {4 * C, C}), w.fc_b);
  ops.gelu_forward(a.fch_gelu, a.fch);
  ops.linear_forward(x_out, a.fch_gelu, view(ops, p.fc_proj_w, {C, 4 * C}), w.fc_proj_b);
  ops.add(x_out, a.residual2, x_out);
}

template <typename Real>
void block_backward(Ops& ops, const GPTConfig& config, BlockWeights<Real>& weights, const Tensor& x_in,
                    const BlockActivations& a, BlockScratch& s, const Tensor& dresidual,
                    const Dropout& dropout, int layer) {
  check_layer(config, dropout, layer);
  const int C = config.hidden;
  const SmallTensors w = small_tensors(ops, weights.small(), C);
  const SmallTensors g = small_tensors(ops, weights.small_gradients(), C);
  // dresidual = dL/d(out) = dL/d(r2) through the skip connection, and dL/d(dropped MLP output). The MLP
  // output's gradient, mask * dresidual / (1-p), borrows d_ln2, which is free until fc's backward below.
  const Tensor& d_mlp_out = hidden_gradient(ops, dropout, layer, DropoutSite::kMlpOutput, dresidual, s.d_ln2);
  ops.fill(s.d_fch_gelu, 0);
  tiled_linear_backward(ops, weights, BlockLinear::kFcProj, C, s.d_fch_gelu, g.fc_proj_b, d_mlp_out,
                        a.fch_gelu);
  ops.fill(s.d_fch, 0);
  ops.gelu_backward(s.d_fch, a.fch, s.d_fch_gelu);
  ops.fill(s.d_ln2, 0);
  tiled_linear_backward(ops, weights, BlockLinear::kFc, C, s.d_ln2, g.fc_b, s.d_fch, a.ln2);
  // LayerNorm 2's input gradient joins the skip path: dresidual becomes dL/d(r2).
  ops.layernorm_backward(dresidual, g.ln2_w, g.ln2_b, s.d_ln2, a.residual2, w.ln2_w, a.ln2_mean, a.ln2_rstd);
  // dL/d(r2) is also dL/d(dropped attention projection output); the projection's own gradient borrows d_ln1,
  // which is free until qkv's backward.
  const Tensor& d_attn_out =
      hidden_gradient(ops, dropout, layer, DropoutSite::kAttentionOutput, dresidual, s.d_ln1);
  ops.fill(s.d_atty, 0);
  tiled_linear_backward(ops, weights, BlockLinear::kAttnProj, C, s.d_atty, g.attn_proj_b, d_attn_out, a.atty);
  const AttentionMasks attention_masks(dropout, layer, int(x_in.shape[0]));
  ops.fill(s.d_qkv, 0);
  ops.attention_backward(s.d_qkv, s.d_atty, a.qkv, a.att, attention_masks.get());
  ops.fill(s.d_ln1, 0);
  tiled_linear_backward(ops, weights, BlockLinear::kQkv, C, s.d_ln1, g.qkv_b, s.d_qkv, a.ln1);
  // LayerNorm 1's input gradient joins the skip path: dresidual becomes dL/d(x_in).
  ops.layernorm_backward(dresidual, g.ln1_w, g.ln1_b, s.d_ln1, x_in, w.ln1_w, a.ln1_mean, a.ln1_rstd);
}

template <typename Real>
Real head_forward(Ops& ops, const GPTConfig& config, const Real* lnf_w, const Real* lnf_b, const Real* wte,
                  const Tensor& x, const Tensor& targets, HeadActivations& a) {
  const int64_t C = config.hidden;
  ops.layernorm_forward(a.lnf, a.lnf_mean, a.lnf_rstd, x, view(ops, lnf_w, {C}), view(ops, lnf_b, {C}));
  ops.linear_forward(a.probs, a.lnf, view(ops, wte, {config.padded_vocab(), C}), Tensor{});
  if (targets.empty()) return Real(0);
  ops.cross_entropy_forward(a.losses, a.probs, a.probs, targets, config.vocab);
  // Summed in double so the mean does not depend on the summation order's rounding more than necessary.
  return static_cast<Real>(ops.sum(a.losses) / double(a.losses.numel()));
}

template <typename Real>
void head_backward(Ops& ops, const GPTConfig& config, const Real* lnf_w, const Real* wte, Real* dlnf_w,
                   Real* dlnf_b, Real* dwte, const Tensor& x, const Tensor& targets, HeadActivations& a,
                   Real dloss_per_token, const Tensor& dx) {
  const int64_t C = config.hidden;
  ops.fill(a.dlosses, double(dloss_per_token));
  // dlogits overwrite the probabilities in place.
  ops.cross_entropy_backward(a.probs, a.probs, targets, a.dlosses, config.vocab);
  ops.fill(a.dlnf, 0);
  ops.linear_backward(a.dlnf, view(ops, dwte, {config.padded_vocab(), C}), Tensor{}, a.probs, a.lnf,
                      view(ops, wte, {config.padded_vocab(), C}));
  ops.fill(dx, 0);
  ops.layernorm_backward(dx, view(ops, dlnf_w, {C}), view(ops, dlnf_b, {C}), a.dlnf, x, view(ops, lnf_w, {C}),
                         a.lnf_mean, a.lnf_rstd);
}

#define GPT_INSTANTIATE_LAYERS(Real)                                                                        \
  template void embed_forward<Real>(Ops&, const GPTConfig&, const Real*, const Real*, const Tensor&,        \
                                    const Tensor&, const Dropout&);                                         \
  template void embed_backward<Real>(Ops&, const GPTConfig&, Real*, Real*, const Tensor&, const Tensor&,    \
                                     const Tensor&, const Dropout&);                                        \
  template class WholeBlock<Real>;                                                                          \
  template void block_forward<Real>(Ops&, const GPTConfig&, BlockWeights<Real>&, const Tensor&,             \
                                    const Tensor&, BlockActivations&, const Dropout&, int, bool);           \
  template void block_forward<Real>(Ops&, const GPTConfig&, const Real*, const Tensor&, const Tensor&,      \
                                    BlockActivations&, const Dropout&, int);                                \
  template void block_backward<Real>(Ops&, const GPTConfig&, BlockWeights<Real>&, const Tensor&,            \
                                     const BlockActivations&, BlockScratch&, const Tensor&, const Dropout&, \
                                     int);                                                                  \
  template void block_decode<Real>(Ops&, const GPTConfig&, const Real*, const Tensor&, const Tensor&,       \
                                   DecodeActivations&, const Tensor&, int);                                 \
  template Real head_forward<Real>(Ops&, const GPTConfig&, const Real*, const Real*, const Real*,           \
                                   const Tensor&, const Tensor&, HeadActivations&);                         \
  template void head_backward<Real>(Ops&, const GPTConfig&, const Real*, const Real*, Real*, Real*, Real*,  \
                                    const Tensor&, const Tensor&, HeadActivations&, Real, const Tensor&);

GPT_INSTANTIATE_LAYERS(float)
GPT_INSTANTIATE_LAYERS(double)

}  // namespace gpt
