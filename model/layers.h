// GPT-2's layers as functions over full weights: embedding, transformer block, and the head (final LayerNorm,
// tied output projection, cross-entropy), computed through the device seam (kernels/ops.h). The model never
// sees a shard: the one layer loop (loop.h) calls these with a unit's full weights from its weight source.
//
// Block forward, with x the block input [B*T, C]:
//   ln1 = LN(x);  qkv = ln1 Wqkv^T + bqkv;  atty = causal_attention(qkv);  r2 = x + atty Wo^T + bo
//   ln2 = LN(r2); h = ln2 Wfc^T + bfc;  g = gelu(h);  out = r2 + g Wp^T + bp
// Head: lnf = LN(x_L);  logits = lnf wte^T  (wte tied to the output layer);  loss = cross_entropy(logits).
//
// Dropout (Megatron's placement): x0 = drop(wte[tok] + wpe[t]); in a block, atty = drop(A) V, and
// r2 = x + drop(atty Wo^T + bo), out = r2 + drop(g Wp^T + bp). The head has none.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/ops.h"
#include "model/config.h"
#include "model/params.h"
#include "model/tensor_parallel.h"
#include "tensor/arena.h"
#include "tensor/tensor.h"

namespace gpt {

// Where a dropout mask is drawn; the value is part of the mask's key, so it must never change.
enum class DropoutSite : uint64_t {
  kEmbedding = 0,        // the embedding output x0 (drawn with layer kEmbeddingLayer)
  kAttentionProbs = 1,   // the attention probabilities A [NH,T,T] of each sequence
  kAttentionOutput = 2,  // the attention projection's output, before the first residual add
  kMlpOutput = 3,        // the MLP's output, before the second residual add
};
// The layer index of the embedding's mask: it precedes block 0.
inline constexpr int kEmbeddingLayer = -1;

// Dropout of one micro-batch. The mask of element e of sequence b at (layer, site) is kept when
// random::uniform32(dropout_key(seed, windows[b], layer, site), e) >= p, with e = t*C + c for [T,C]
// activations and h*T*T + i*T + j for attention probabilities; kept values are scaled by 1/(1-p). Keying by
// the sequence's global window index, not its slot in the micro-batch, makes the masks independent of how
// the global batch is split over ranks and micro-steps; recomputation replays them. The default (and any
// Dropout without windows, or with both probabilities 0) is exactly the path without dropout.
struct Dropout {
  double hidden = 0;  // embedding output, attention-projection output, MLP output (Megatron's hidden dropout)
  double attention = 0;  // attention probabilities
  uint64_t seed = 0;
  const int64_t* windows = nullptr;  // [B]: global stream index of each sequence of the micro-batch (loader)

  bool active() const { return windows != nullptr && (hidden > 0 || attention > 0); }
  // keys[b] = dropout_key(seed, windows[b], layer, site) for b < B.
  std::vector<uint64_t> keys(int layer, DropoutSite site, int B) const;
};

// derive_key chain of (seed, a domain tag that keeps these streams apart from initialization's, window,
// layer, site).
uint64_t dropout_key(uint64_t seed, int64_t window, int layer, DropoutSite site);

// Weights as the layer functions read them: the memory of a unit (or of a part of one) on the ops' device and
// the dtype it holds, the loop's compute dtype (its Real, or fp16/bf16 in a half layer loop, loop.h). Offsets
// count elements, as a pointer's do, so block_params() (params.h) lays out a unit of any dtype. A typed
// pointer converts to it with its own dtype.
struct WeightView {
  const void* data = nullptr;
  DType dtype = DType::kF32;

  WeightView() = default;
  WeightView(const void* data, DType dtype) : data(data), dtype(dtype) {}
  template <typename Real>
  WeightView(const Real* values)
      : data(values), dtype(dtype_of<Real>()) {}  // NOLINT(google-explicit-constructor)
  WeightView& operator+=(int64_t elements) {
    data = static_cast<const char*>(data) + dtype_bytes(dtype, elements);
    return *this;
  }
  WeightView operator+(int64_t elements) const {
    WeightView w = *this;
    return w += elements;
  }
  explicit operator bool() const { return data != nullptr; }
};

// Activations are tensors of the backend's device, allocated once from an arena (category "activations"), in
// the loop's compute dtype; next to fp16/bf16 ones, LayerNorm's statistics, attention's log-sum-exp and the
// losses (with their softmax statistics) are fp32, as the ops' mixed-precision contract says (kernels/ops.h).
// What one block's backward needs from its forward (the block input is kept by the caller).
struct BlockActivations {
  Tensor ln1, ln1_mean, ln1_rstd;  // [B,T,C], [B*T], [B*T]
  Tensor qkv;                      // [B,T,3C]
  Tensor att;                      // attention's residual (Ops::attention_residual): [B,NH,T,T] softmax
                                   // probabilities, or [B,NH,T] each row's log-sum-exp
  Tensor atty;                     // [B,T,C] attention output before the projection
  Tensor residual2;                // [B,T,C] x + attention branch
  Tensor ln2, ln2_mean, ln2_rstd;  // [B,T,C], [B*T], [B*T]
  Tensor fch, fch_gelu;            // [B,T,4C] each
  // Whether att is this set's own; selective recomputation shares one (the loop sets att) and bytes() does
  // not count a shared one.
  bool owns_probs = true;

  // With tensor parallelism the shapes are this rank's: qkv [B,T,3C/t], att [B,NH/t,T,T] (or [B,NH/t,T]),
  // atty [B,T,C/t], fch [B,T,4C/t]; with sequence parallelism ln1, residual2, ln2 and their statistics hold
  // T/t positions. residual: what the backend's attention keeps (Ops::attention_residual).
  void allocate(Arena& arena, DType dtype, const GPTConfig& config, int B, int T, bool own_probs = true,
                const TensorParallel& tp = TensorParallel{},
                AttentionResidual residual = AttentionResidual::kProbabilities);
  size_t bytes() const;
};

// Temporaries of a block's backward, shared by all blocks (and by the embedding's).
struct BlockScratch {
  Tensor d_fch_gelu, d_fch;     // [B,T,4C]
  Tensor d_ln2, d_atty, d_ln1;  // [B,T,C]; d_ln2 and d_ln1 also hold masked dropout gradients
  Tensor d_qkv;                 // [B,T,3C]

  // Tensor parallelism: this rank's widths (as BlockActivations), d_ln2 and d_ln1 [B,T/t,C] with sequence
  // parallelism.
  void allocate(Arena& arena, DType dtype, const GPTConfig& config, int B, int T,
                const TensorParallel& tp = TensorParallel{});
  size_t bytes() const;
};

struct HeadActivations {
  Tensor lnf, lnf_mean, lnf_rstd;  // [B,T,C], [B*T], [B*T]
  Tensor probs;                    // [B*T,Vp] logits, then probabilities (in place); see classifier below
  Tensor losses;                   // [B*T]
  Tensor dlosses;                  // [B*T]
  Tensor dlnf;                     // [B,T,C] backward temporary
  // Tensor parallelism (t > 1): probs holds this rank's Vp/t vocabulary columns; stats [B*T,3] this rank's
  // softmax statistics and stats_all [t,B*T,3] the group's (vocabulary-parallel cross-entropy). With sequence
  // parallelism lnf, its statistics and dlnf hold T/t positions and lnf_full [B,T,C] the gathered output.
  Tensor stats, stats_all, lnf_full;
  // The fused classifier (Ops::classifier_forward, t = 1 only): [R,Vp] one chunk of logits, R =
  // classifier_chunk_rows(B*T), in place of probs, which is then allocated only by a forward without targets
  // (allocate_probs), whose caller reads the whole logits.
  Tensor logits_chunk;

  // classifier_rows > 0: the fused head, with a chunk of that many rows.
  void allocate(Arena& arena, DType dtype, const GPTConfig& config, int B, int T,
                const TensorParallel& tp = TensorParallel{}, int64_t classifier_rows = 0);
  void allocate_probs(Arena& arena, DType dtype, const GPTConfig& config, int B, int T);
  bool fused() const { return logits_chunk.data != nullptr; }
  size_t bytes() const;
};

// One token's pass through a block during incremental decoding (model/decoder.h): rows [1,C] and [1,4C], and
// the attention probabilities [NH, max_positions].
struct DecodeActivations {
  Tensor ln1, ln1_mean, ln1_rstd, atty, att, residual2, ln2, ln2_mean, ln2_rstd, fch, fch_gelu;

  void allocate(Arena& arena, DType dtype, const GPTConfig& config);
};

// Every layer computes through `ops` (the device seam, kernels/ops.h). Weights are the unit's full weights on
// the ops' device (params.h layout); tokens are [B, T] int32 tensors on the device.

// x0[b,t,:] = drop(wte[tokens[b,t]] + wpe[t]) (hidden dropout, site kEmbedding).
// Tensor parallelism: wte holds this rank's vocabulary rows; x0 is [B,T/t,C] with sequence parallelism.
void embed_forward(Ops& ops, const GPTConfig& config, WeightView wte, WeightView wpe, const Tensor& tokens,
                   const Tensor& x0, const Dropout& dropout = Dropout{},
                   const TensorParallel& tp = TensorParallel{});
// Accumulates into dwte and dwpe (either may be null) from dx0; dropout must be the forward's. `scratch`
// ([B,T,C]) holds the masked gradient when hidden dropout is on.
template <typename Real>
void embed_backward(Ops& ops, const GPTConfig& config, Real* dwte, Real* dwpe, const Tensor& tokens,
                    const Tensor& dx0, const Tensor& scratch, const Dropout& dropout = Dropout{},
                    const TensorParallel& tp = TensorParallel{});

// A block's parameters as the block functions see them: the LayerNorms and biases for the whole block, and
// each of the four matrices in tiles of output rows (memory-centric tiling, params.h), asked for in turn and
// handed back once used, so a tiled source holds one tile at a time. Untiled (tiles() == 1) tile 0 is the
// whole matrix.
template <typename Real>
class BlockWeights {
 public:
  virtual ~BlockWeights() = default;
  virtual int tiles() const = 0;
  // The LayerNorm and bias members are valid until the block function returns; the matrix members are unused.
  // Weights are in the loop's compute dtype, gradients in Real.
  virtual BlockParams<WeightView> small() = 0;
  virtual BlockParams<Real*> small_gradients() = 0;  // the backward's, accumulated into
  // Tile k of a matrix: rows [k*OC/N, (k+1)*OC/N), valid until matrix_done(linear, k).
  virtual WeightView matrix(BlockLinear linear, int k) = 0;
  // Where tile k's gradient accumulates (backward); final once matrix_done(linear, k) is called.
  virtual Real* matrix_gradient(BlockLinear linear, int k) = 0;
  virtual void matrix_done(BlockLinear linear, int k) = 0;
};

// A whole block unit (block_params layout, of one of t tensor-parallel ranks) and, for the backward, its
// gradient.
template <typename Real>
class WholeBlock final : public BlockWeights<Real> {
 public:
  WholeBlock(WeightView weights, Real* grads, int C, int t = 1);
  int tiles() const override { return 1; }
  BlockParams<WeightView> small() override { return w_; }
  BlockParams<Real*> small_gradients() override { return g_; }
  WeightView matrix(BlockLinear linear, int k) override;
  Real* matrix_gradient(BlockLinear linear, int k) override;
  void matrix_done(BlockLinear, int) override {}

 private:
  BlockParams<WeightView> w_;
  BlockParams<Real*> g_{};
};

// What a block leaves in x_out. Its output is r2 + drop(MLP output); llm.c adds those two inside the next
// LayerNorm's op (one pass over the residual stream fewer per block), and so does the layer loop: a block
// may leave the MLP's part alone in x_out, and its consumer (the next block, or the head) is handed the
// block's acts.residual2 as its input's addend.
enum class BlockOutput {
  kSum,      // x_out = r2 + drop(MLP output)
  kPending,  // x_out = drop(MLP output); the consumer adds acts.residual2
  kNone,     // no x_out (recomputation for the backward, which reads the activations only: stops after GELU)
};

// Writes x_out [B,T,C] (as `output` says) and the activations. With active dropout, layer (0 .. L-1) is part
// of the masks' key and must be given. x_in_addend, when not empty, is the previous block's residual2, x_in
// holding its kPending output: the block adds them in LayerNorm 1's op and writes the sum back into x_in,
// where the backward reads the block's input. Tensor parallelism: weights and activations are this rank's
// (x_in and x_out [B,T/t,C] with sequence parallelism; tensor_parallel.h).
template <typename Real>
void block_forward(Ops& ops, const GPTConfig& config, BlockWeights<Real>& weights, const Tensor& x_in,
                   const Tensor& x_out, BlockActivations& acts, const Dropout& dropout = Dropout{},
                   int layer = -1, BlockOutput output = BlockOutput::kSum,
                   const TensorParallel& tp = TensorParallel{}, const Tensor& x_in_addend = Tensor{});
// The same over the block's unit (block_params layout).
void block_forward(Ops& ops, const GPTConfig& config, WeightView weights, const Tensor& x_in,
                   const Tensor& x_out, BlockActivations& acts, const Dropout& dropout = Dropout{},
                   int layer = -1);

// dresidual holds dL/d(x_out) on entry and dL/d(x_in) on return; the gradients accumulate. dropout and layer
// must be the forward's. recompute_attention (selective recomputation): acts.att does not hold this block's
// attention residual; it is computed again from acts.qkv (and the same dropout) before its use. The
// attention backward reads acts.atty as the forward's output (a log-sum-exp backend needs it).
template <typename Real>
void block_backward(Ops& ops, const GPTConfig& config, BlockWeights<Real>& weights, const Tensor& x_in,
                    const BlockActivations& acts, BlockScratch& scratch, const Tensor& dresidual,
                    const Dropout& dropout = Dropout{}, int layer = -1, bool recompute_attention = false,
                    const TensorParallel& tp = TensorParallel{});

// Incremental decoding (no dropout): the token at position pos, whose block input is x_in [1,C], through the
// block. Its qkv row is written into row pos of qkv_cache [capacity > pos, 3C], whose rows 0..pos-1 hold the
// earlier tokens' rows, and its query attends over rows 0..pos. Writes x_out [1,C]. The same arithmetic as
// block_forward's row pos, one row at a time.
void block_decode(Ops& ops, const GPTConfig& config, WeightView weights, const Tensor& x_in,
                  const Tensor& x_out, DecodeActivations& acts, const Tensor& qkv_cache, int pos);

// Final LayerNorm and tied output projection: leaves logits [B*T,Vp] in acts.probs. With targets, turns them
// into probabilities and per-token losses and returns the mean loss over the B*T tokens; without (an empty
// tensor), returns 0. The fused head (acts.fused()) with targets computes the losses chunk by chunk and keeps
// no probabilities; without targets it needs acts.probs allocated. Tensor parallelism: the
// vocabulary-parallel head (this rank's Vp/t logits; the loss of every token on every rank); it needs
// targets. x_addend, when not empty, is the last block's residual2 (x its kPending output): the final
// LayerNorm adds it in its op and writes the sum back into x, which head_backward reads.
double head_forward(Ops& ops, const GPTConfig& config, WeightView lnf_w, WeightView lnf_b, WeightView wte,
                    const Tensor& x, const Tensor& targets, HeadActivations& acts,
                    const TensorParallel& tp = TensorParallel{}, const Tensor& x_addend = Tensor{});

// dloss_per_token is d(objective)/d(loss of each token) (1/(B*T) for the mean, times accumulation and loss
// scaling factors). Accumulates into dlnf_w, dlnf_b, dwte; overwrites dx [B,T,C]. Consumes acts.probs (the
// fused head recomputes each chunk's logits instead).
template <typename Real>
void head_backward(Ops& ops, const GPTConfig& config, WeightView lnf_w, WeightView wte, Real* dlnf_w,
                   Real* dlnf_b, Real* dwte, const Tensor& x, const Tensor& targets, HeadActivations& acts,
                   Real dloss_per_token, const Tensor& dx, const TensorParallel& tp = TensorParallel{});

}  // namespace gpt
