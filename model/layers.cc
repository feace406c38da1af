// GPT-2's layers composed from the CPU kernels; see layers.h for the math.
#include "model/layers.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/common/random.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/dropout.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/gelu.h"
#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/residual.h"
#include "model/params.h"

namespace gpt {
namespace {

template <typename Real>
size_t bytes_of(std::initializer_list<const std::vector<Real>*> vectors) {
  size_t total = 0;
  for (const auto* v : vectors) total += v->size() * sizeof(Real);
  return total;
}

template <typename Real>
void zero(std::vector<Real>& v) {
  std::fill(v.begin(), v.end(), Real(0));
}

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

// Hidden dropout of x [B, n] in place at (layer, site), when it is on.
template <typename Real>
void drop_hidden(const Dropout& dropout, int layer, DropoutSite site, Real* x, int B, int64_t n) {
  if (!hidden_on(dropout)) return;
  const std::vector<uint64_t> keys = dropout.keys(layer, site, B);
  cpu::dropout_forward(x, x, keys.data(), dropout.hidden, B, n);
}

// The gradient into a hidden-dropout site's input given dout [B, n]: dout itself when dropout is off, else
// mask * dout / (1-p) written to `buffer`.
template <typename Real>
const Real* hidden_gradient(const Dropout& dropout, int layer, DropoutSite site, const Real* dout,
                            Real* buffer, int B, int64_t n) {
  if (!hidden_on(dropout)) return dout;
  const std::vector<uint64_t> keys = dropout.keys(layer, site, B);
  cpu::dropout_backward(buffer, dout, keys.data(), dropout.hidden, B, n);
  return buffer;
}

// The attention kernel's dropout at a layer, owning the per-sequence keys: null when attention dropout is
// off.
class AttentionMasks {
 public:
  AttentionMasks(const Dropout& dropout, int layer, int B) {
    if (dropout.active() && dropout.attention > 0)
      keys_ = dropout.keys(layer, DropoutSite::kAttentionProbs, B);
    spec_ = {dropout.attention, keys_.data()};
  }
  AttentionMasks(const AttentionMasks&) = delete;
  AttentionMasks& operator=(const AttentionMasks&) = delete;
  const cpu::AttentionDropout* get() const { return keys_.empty() ? nullptr : &spec_; }

 private:
  std::vector<uint64_t> keys_;
  cpu::AttentionDropout spec_;
};

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

template <typename Real>
void BlockActivations<Real>::resize(const GPTConfig& config, int B, int T) {
  const size_t BT = size_t(B) * T, C = config.hidden;
  for (auto* v : {&ln1, &atty, &residual2, &ln2}) v->assign(BT * C, Real(0));
  for (auto* v : {&ln1_mean, &ln1_rstd, &ln2_mean, &ln2_rstd}) v->assign(BT, Real(0));
  qkv.assign(BT * 3 * C, Real(0));
  att.assign(size_t(B) * config.heads * T * T, Real(0));
  fch.assign(BT * 4 * C, Real(0));
  fch_gelu.assign(BT * 4 * C, Real(0));
}

template <typename Real>
size_t BlockActivations<Real>::bytes() const {
  return bytes_of<Real>({&ln1, &ln1_mean, &ln1_rstd, &qkv, &att, &atty, &residual2, &ln2, &ln2_mean,
                         &ln2_rstd, &fch, &fch_gelu});
}

template <typename Real>
void BlockScratch<Real>::resize(const GPTConfig& config, int B, int T) {
  const size_t BT = size_t(B) * T, C = config.hidden;
  d_fch_gelu.assign(BT * 4 * C, Real(0));
  d_fch.assign(BT * 4 * C, Real(0));
  for (auto* v : {&d_ln2, &d_atty, &d_ln1}) v->assign(BT * C, Real(0));
  d_qkv.assign(BT * 3 * C, Real(0));
}

template <typename Real>
size_t BlockScratch<Real>::bytes() const {
  return bytes_of<Real>({&d_fch_gelu, &d_fch, &d_ln2, &d_atty, &d_ln1, &d_qkv});
}

template <typename Real>
void HeadActivations<Real>::resize(const GPTConfig& config, int B, int T) {
  const size_t BT = size_t(B) * T;
  lnf.assign(BT * config.hidden, Real(0));
  dlnf.assign(BT * config.hidden, Real(0));
  lnf_mean.assign(BT, Real(0));
  lnf_rstd.assign(BT, Real(0));
  probs.assign(BT * config.padded_vocab(), Real(0));
  losses.assign(BT, Real(0));
  dlosses.assign(BT, Real(0));
}

template <typename Real>
size_t HeadActivations<Real>::bytes() const {
  return bytes_of<Real>({&lnf, &dlnf, &lnf_mean, &lnf_rstd, &probs, &losses, &dlosses});
}

template <typename Real>
void embed_forward(const GPTConfig& config, const Real* wte, const Real* wpe, const int32_t* tokens, int B,
                   int T, Real* x0, const Dropout& dropout) {
  cpu::embedding_forward(x0, tokens, wte, wpe, B, T, config.hidden);
  drop_hidden(dropout, kEmbeddingLayer, DropoutSite::kEmbedding, x0, B, int64_t(T) * config.hidden);
}

template <typename Real>
void embed_backward(const GPTConfig& config, Real* dwte, Real* dwpe, const int32_t* tokens, const Real* dx0,
                    int B, int T, const Dropout& dropout) {
  const int64_t n = int64_t(T) * config.hidden;
  // dx0 is the caller's (const): the masked gradient needs a buffer of its own.
  std::vector<Real> masked(hidden_on(dropout) ? B * n : 0);
  const Real* d_embedding =
      hidden_gradient(dropout, kEmbeddingLayer, DropoutSite::kEmbedding, dx0, masked.data(), B, n);
  cpu::embedding_backward(dwte, dwpe, d_embedding, tokens, B, T, config.hidden);
}

template <typename Real>
void block_forward(const GPTConfig& config, const Real* weights, const Real* x_in, Real* x_out,
                   BlockActivations<Real>& a, int B, int T, const Dropout& dropout, int layer) {
  check_layer(config, dropout, layer);
  const int C = config.hidden, NH = config.heads, BT = B * T;
  const int64_t TC = int64_t(T) * C;
  const BlockParams<const Real*> w = block_params(weights, C);
  cpu::layernorm_forward(a.ln1.data(), a.ln1_mean.data(), a.ln1_rstd.data(), x_in, w.ln1_w, w.ln1_b, BT, C);
  cpu::linear_forward(a.qkv.data(), a.ln1.data(), w.qkv_w, w.qkv_b, BT, C, 3 * C);
  const AttentionMasks attention_masks(dropout, layer, B);
  cpu::attention_forward(a.atty.data(), a.att.data(), a.qkv.data(), B, T, C, NH, attention_masks.get());
  // The attention projection lands in x_out first (dropped there), then becomes the residual sum
  // r2 = x + drop(proj).
  cpu::linear_forward(x_out, a.atty.data(), w.attn_proj_w, w.attn_proj_b, BT, C, C);
  drop_hidden(dropout, layer, DropoutSite::kAttentionOutput, x_out, B, TC);
  cpu::residual_forward(a.residual2.data(), x_in, x_out, int64_t(BT) * C);
  cpu::layernorm_forward(a.ln2.data(), a.ln2_mean.data(), a.ln2_rstd.data(), a.residual2.data(), w.ln2_w,
                         w.ln2_b, BT, C);
  cpu::linear_forward(a.fch.data(), a.ln2.data(), w.fc_w, w.fc_b, BT, C, 4 * C);
  cpu::gelu_forward(a.fch_gelu.data(), a.fch.data(), int64_t(BT) * 4 * C);
  cpu::linear_forward(x_out, a.fch_gelu.data(), w.fc_proj_w, w.fc_proj_b, BT, 4 * C, C);
  drop_hidden(dropout, layer, DropoutSite::kMlpOutput, x_out, B, TC);
  cpu::residual_forward(x_out, a.residual2.data(), x_out, int64_t(BT) * C);
}

template <typename Real>
void block_backward(const GPTConfig& config, const Real* weights, Real* grads, const Real* x_in,
                    const BlockActivations<Real>& a, BlockScratch<Real>& s, Real* dresidual, int B, int T,
                    const Dropout& dropout, int layer) {
  check_layer(config, dropout, layer);
  const int C = config.hidden, NH = config.heads, BT = B * T;
  const int64_t TC = int64_t(T) * C;
  const BlockParams<const Real*> w = block_params(weights, C);
  const BlockParams<Real*> g = block_params(grads, C);
  // dresidual = dL/d(out) = dL/d(r2) through the skip connection, and dL/d(dropped MLP output). The MLP
  // output's gradient, mask * dresidual / (1-p), borrows d_ln2, which is free until fc's backward below.
  const Real* d_mlp_out = hidden_gradient(dropout, layer, DropoutSite::kMlpOutput,
                                          static_cast<const Real*>(dresidual), s.d_ln2.data(), B, TC);
  zero(s.d_fch_gelu);
  cpu::linear_backward(s.d_fch_gelu.data(), g.fc_proj_w, g.fc_proj_b, d_mlp_out, a.fch_gelu.data(),
                       w.fc_proj_w, BT, 4 * C, C);
  zero(s.d_fch);
  cpu::gelu_backward(s.d_fch.data(), a.fch.data(), s.d_fch_gelu.data(), int64_t(BT) * 4 * C);
  zero(s.d_ln2);
  cpu::linear_backward(s.d_ln2.data(), g.fc_w, g.fc_b, s.d_fch.data(), a.ln2.data(), w.fc_w, BT, C, 4 * C);
  // LayerNorm 2's input gradient joins the skip path: dresidual becomes dL/d(r2).
  cpu::layernorm_backward(dresidual, g.ln2_w, g.ln2_b, s.d_ln2.data(), a.residual2.data(), w.ln2_w,
                          a.ln2_mean.data(), a.ln2_rstd.data(), BT, C);
  // dL/d(r2) is also dL/d(dropped attention projection output); the projection's own gradient borrows d_ln1,
  // which is free until qkv's backward.
  const Real* d_attn_out = hidden_gradient(dropout, layer, DropoutSite::kAttentionOutput,
                                           static_cast<const Real*>(dresidual), s.d_ln1.data(), B, TC);
  zero(s.d_atty);
  cpu::linear_backward(s.d_atty.data(), g.attn_proj_w, g.attn_proj_b, d_attn_out, a.atty.data(),
                       w.attn_proj_w, BT, C, C);
  const AttentionMasks attention_masks(dropout, layer, B);
  zero(s.d_qkv);
  cpu::attention_backward(s.d_qkv.data(), s.d_atty.data(), a.qkv.data(), a.att.data(), B, T, C, NH,
                          attention_masks.get());
  zero(s.d_ln1);
  cpu::linear_backward(s.d_ln1.data(), g.qkv_w, g.qkv_b, s.d_qkv.data(), a.ln1.data(), w.qkv_w, BT, C, 3 * C);
  // LayerNorm 1's input gradient joins the skip path: dresidual becomes dL/d(x_in).
  cpu::layernorm_backward(dresidual, g.ln1_w, g.ln1_b, s.d_ln1.data(), x_in, w.ln1_w, a.ln1_mean.data(),
                          a.ln1_rstd.data(), BT, C);
}

template <typename Real>
Real head_forward(const GPTConfig& config, const Real* lnf_w, const Real* lnf_b, const Real* wte,
                  const Real* x, const int32_t* targets, HeadActivations<Real>& a, int B, int T) {
  const int C = config.hidden, BT = B * T, V = config.vocab, Vp = config.padded_vocab();
  cpu::layernorm_forward(a.lnf.data(), a.lnf_mean.data(), a.lnf_rstd.data(), x, lnf_w, lnf_b, BT, C);
  cpu::linear_forward(a.probs.data(), a.lnf.data(), wte, static_cast<const Real*>(nullptr), BT, C, Vp);
  if (targets == nullptr) return Real(0);
  cpu::softmax_cross_entropy_forward(a.losses.data(), a.probs.data(), a.probs.data(), targets, BT, V, Vp);
  // Sum in double so the mean does not depend on the summation order's rounding more than necessary.
  double sum = 0;
  for (Real l : a.losses) sum += static_cast<double>(l);
  return static_cast<Real>(sum / BT);
}

template <typename Real>
void head_backward(const GPTConfig& config, const Real* lnf_w, const Real* wte, Real* dlnf_w, Real* dlnf_b,
                   Real* dwte, const Real* x, const int32_t* targets, HeadActivations<Real>& a,
                   Real dloss_per_token, Real* dx, int B, int T) {
  const int C = config.hidden, BT = B * T, V = config.vocab, Vp = config.padded_vocab();
  std::fill(a.dlosses.begin(), a.dlosses.end(), dloss_per_token);
  // dlogits overwrite the probabilities in place.
  cpu::softmax_cross_entropy_backward(a.probs.data(), a.probs.data(), targets, a.dlosses.data(), BT, V, Vp);
  std::fill(a.dlnf.begin(), a.dlnf.end(), Real(0));
  cpu::linear_backward(a.dlnf.data(), dwte, static_cast<Real*>(nullptr), a.probs.data(), a.lnf.data(), wte,
                       BT, C, Vp);
  std::fill(dx, dx + size_t(BT) * C, Real(0));
  cpu::layernorm_backward(dx, dlnf_w, dlnf_b, a.dlnf.data(), x, lnf_w, a.lnf_mean.data(), a.lnf_rstd.data(),
                          BT, C);
}

#define GPT_INSTANTIATE_LAYERS(Real)                                                                        \
  template struct BlockActivations<Real>;                                                                   \
  template struct BlockScratch<Real>;                                                                       \
  template struct HeadActivations<Real>;                                                                    \
  template void embed_forward<Real>(const GPTConfig&, const Real*, const Real*, const int32_t*, int, int,   \
                                    Real*, const Dropout&);                                                 \
  template void embed_backward<Real>(const GPTConfig&, Real*, Real*, const int32_t*, const Real*, int, int, \
                                     const Dropout&);                                                       \
  template void block_forward<Real>(const GPTConfig&, const Real*, const Real*, Real*,                      \
                                    BlockActivations<Real>&, int, int, const Dropout&, int);                \
  template void block_backward<Real>(const GPTConfig&, const Real*, Real*, const Real*,                     \
                                     const BlockActivations<Real>&, BlockScratch<Real>&, Real*, int, int,   \
                                     const Dropout&, int);                                                  \
  template Real head_forward<Real>(const GPTConfig&, const Real*, const Real*, const Real*, const Real*,    \
                                   const int32_t*, HeadActivations<Real>&, int, int);                       \
  template void head_backward<Real>(const GPTConfig&, const Real*, const Real*, Real*, Real*, Real*,        \
                                    const Real*, const int32_t*, HeadActivations<Real>&, Real, Real*, int,  \
                                    int);

GPT_INSTANTIATE_LAYERS(float)
GPT_INSTANTIATE_LAYERS(double)

}  // namespace gpt
