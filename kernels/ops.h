// The device seam: one interface for every computation on model state, so the model's layer loop and the
// ZeRO engine never know which device they run on. A backend (the CPU's in kernels/cpu/cpu_ops.h; CUDA's in
// kernels/cuda/cuda_ops.h) implements each op on tensors of its own device; the callers only allocate
// tensors from an Arena over the backend's memory and call ops.
//
// Two kinds of memory:
//   device memory - model state, gradients, activations: touched only inside op calls;
//   wire memory   - communication buffers: the host's communicator reads and writes them, and ops may read
//                   and write them too (the CPU's ordinary memory; pinned, device-mapped host memory for a
//                   GPU). A gathered unit arrives in wire memory; an op turns it into device weights.
// Ops run in issue order on one stream of the backend: a CPU backend completes each call before it returns;
// an asynchronous backend must complete all earlier work before an op returns a value to the host (sum,
// sum_of_squares, all_finite, download) and before synchronize() returns.
// A host communicator (MPI) reads and writes wire memory on the host and knows nothing of pending ops:
// callers synchronize() before handing wire memory to it (zero/context.h,
// EngineContext::before_communication; a communicator that orders itself after the device's work, NCCL on the
// backend's stream, needs no wait), and a backend's release of a memory block waits for the ops that may
// still use it.
//
// Float ops take fp32 or fp64 tensors (fp64 for the gradient checks), all float tensors of one call the same
// dtype. The CUDA backend's layer ops also take a mixed-precision contract (Megatron / llm.c style; CpuOps
// keeps fp32 and fp64 only and reports it as UnsupportedOp, and MixedPrecisionCpuOps, kernels/cpu, is its
// reference on the CPU), decided by the activations' dtype T, fp16 or bf16 (kernels/mixed_precision.h checks
// it):
//   embedding_forward(_rows)    out, wte, wpe in T
//   embedding_backward(_rows)   dout in T; dwte, dwpe fp32
//   layernorm_forward           out, x, w, b in T; mean, rstd fp32
//   layernorm_backward          dx, dout, x, w in T; dw, db, mean, rstd fp32
//   linear_* (and _columns)     x, w, b, out, dout, dx in T; dw, db fp32
//   attention_*                 qkv, out, dout, dqkv in T; the residual att in T as probabilities, fp32
//                               as one log-sum-exp per row (rounded to T, a row's probabilities would all
//                               be off by the same factor, up to 3% at GPT-2's scores)
//   gelu_*, add, dropout_*      every tensor in T
//   cross_entropy_*             logits, probs, dlogits in T; losses, dlosses, stats fp32
//   classifier_*                lnf, wte, dlnf and the logits' scratch in T; losses, dlosses, dwte fp32
// Every value is computed in fp32 and each output rounded to its dtype once; with T fp32 these are the plain
// fp32 ops. Any other combination throws UnsupportedOp naming the op and its tensors' dtypes.
// Shapes give the sizes: [N, C] rows for LayerNorm and linear, [B, T, C] activations, [B, NH, T, T] attention
// probabilities or [B, NH, T] their rows' log-sum-exp (Ops::attention_residual). An empty tensor (null data)
// is an absent optional argument.
#pragma once

#include <cstdint>
#include <stdexcept>

#include "kernels/attention_residual.h"
#include "tensor/arena.h"
#include "tensor/tensor.h"

namespace gpt {

// What a backend throws for an op it lacks for the dtype of its tensors (the CUDA backend's layer ops take
// fp32 and the mixed fp16/bf16 contract above, the CPU's fp32 and fp64): the op-case table (kernels/cases)
// reports it as "not supported", never as a pass or a failure of the op.
class UnsupportedOp : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// AdamW's hyperparameters (lr is set per step by the schedule).
struct AdamWHyper {
  double lr = 3e-4;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.0;  // the caller passes 0 for biases and LayerNorm parameters
  bool decoupled = true;  // AdamW; false: Adam with L2 regularization (weight decay added to the gradient)
};

// Dropout masks of one op: probability p and one key per sequence (host memory, [B]); see model/layers.h.
// The mask bit of element e of sequence b is drawn at counter element_offset + e under keys[b], so a rank
// that holds a slice of each sequence (a tensor-parallel rank's heads, a sequence-parallel rank's positions)
// passes the global index of its first element and draws the bits the whole tensor would draw there.
struct DropoutMask {
  double p = 0;
  const uint64_t* keys = nullptr;
  int64_t element_offset = 0;
};

// A tensor's rows [first, first + count) as a [count, K] view, K its last dimension (lnf [B, T, C] is read
// as [B*T, C] rows).
Tensor row_range(const Tensor& t, int64_t first, int64_t count);
// Elements [first, first + count) of a tensor in memory order as a [count] view (targets [B, T] or losses
// [B*T], one element per row).
Tensor element_range(const Tensor& t, int64_t first, int64_t count);

// The sizes of a classifier_forward / _backward call, checked (std::invalid_argument naming `op` when the
// shapes disagree): N rows of C features, Vp logits of which vocab are real, R rows per chunk.
struct ClassifierShape {
  int64_t N = 0, C = 0, Vp = 0, R = 0;
};
ClassifierShape classifier_shape(const char* op, const Tensor& lnf, const Tensor& wte, const Tensor& targets,
                                 const Tensor& per_row, int vocab, const Tensor& scratch);

class Ops {
 public:
  virtual ~Ops() = default;
  virtual Device device() const = 0;
  virtual BlockSource& device_memory() = 0;
  virtual BlockSource& wire_memory() = 0;
  // Whether ops compute values at all. false for the dry backend (kernels/dry), which the planner runs the
  // engine on to count its memory: work that only produces values (initializing the weights) is skipped.
  virtual bool computes() const { return true; }
  // What GEMMs over fp32 tensors may round their inputs to on the backend's matrix units, accumulating in
  // fp32 whatever is asked: fp32 (the default) multiplies exactly; fp16 or bf16 ask for tensor cores, with
  // inputs rounded to that dtype inside the GEMM (gpt_train's --fp16/--bf16 on a GPU, while the layer loop
  // keeps its activations in fp32; the CUDA backend's attention then runs its half kernels on rounded
  // copies, its outputs rounded too). A backend without such units (the CPU) multiplies exactly whatever is
  // asked, so its outputs never depend on this.
  virtual void set_matmul_inputs(DType inputs) {}
  // Waits for every op issued so far.
  virtual void synchronize() = 0;
  // The dtype the layer ops' activations take for a run at `precision` (the dtype of its compute weights):
  // precision itself where the backend's layer ops take it (the CUDA backend's fp16 and bf16 contract), else
  // fp32 (fp64 for fp64), the dtype the layer loop widens gathered weights to.
  virtual DType compute_dtype(DType precision) const {
    return precision == DType::kF64 ? DType::kF64 : DType::kF32;
  }

  // Moving bytes: dst.nbytes() bytes; tensors may live in device or wire memory.
  virtual void upload(const Tensor& dst, const void* host) = 0;
  virtual void download(void* host, const Tensor& src) = 0;
  virtual void copy(const Tensor& dst, const Tensor& src) = 0;
  virtual void fill(const Tensor& t, double value) = 0;

  // Transformer forward and backward. Backward ops accumulate into weight gradients (dw, db) and overwrite
  // input gradients (dx) unless said otherwise.
  virtual void embedding_forward(const Tensor& out, const Tensor& tokens, const Tensor& wte,
                                 const Tensor& wpe) = 0;
  // Accumulates into dwte and dwpe (either may be empty).
  virtual void embedding_backward(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout,
                                  const Tensor& tokens) = 0;
  // The vocabulary-parallel embedding: wte [R, C] holds rows [first, first + R) of the whole table.
  // Overwrites out [B, T, C] with (first <= token < first + R ? wte[token - first] : 0) + wpe[t] (wpe [maxT,
  // C] may be empty: no position term). Summed over the slices (wpe on one of them) it is embedding_forward's
  // output; with first = 0, the whole table and wpe, bit for bit.
  virtual void embedding_forward_rows(const Tensor& out, const Tensor& tokens, const Tensor& wte,
                                      int64_t first, const Tensor& wpe) = 0;
  // Its backward: accumulates dout [B, T, C] into the rows of dwte [R, C] of the tokens in [first, first + R)
  // (others are skipped) and into dwpe (may be empty), in embedding_backward's order, so each row of dwte
  // gets the bits embedding_backward adds to row first + r.
  virtual void embedding_backward_rows(const Tensor& dwte, int64_t first, const Tensor& dwpe,
                                       const Tensor& dout, const Tensor& tokens) = 0;
  virtual void layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                                 const Tensor& w, const Tensor& b) = 0;
  // The residual stream's add and the LayerNorm that reads the sum: residual = a + b (may alias a or b), then
  // layernorm_forward(out, mean, rstd, residual, w, bias), in one pass over each row where a backend fuses
  // them (CUDA does: each thread reads back the sums it wrote). By default the two ops, which is what the CPU
  // runs.
  virtual void residual_layernorm_forward(const Tensor& residual, const Tensor& out, const Tensor& mean,
                                          const Tensor& rstd, const Tensor& a, const Tensor& b,
                                          const Tensor& w, const Tensor& bias) {
    add(residual, a, b);
    layernorm_forward(out, mean, rstd, residual, w, bias);
  }
  // Accumulates into dx as well (LayerNorm's input gradient joins a residual stream).
  virtual void layernorm_backward(const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& dout,
                                  const Tensor& x, const Tensor& w, const Tensor& mean,
                                  const Tensor& rstd) = 0;
  // out [N, OC] = x [N, IC] w^T (+ b); w is [OC, IC].
  virtual void linear_forward(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& b) = 0;
  // Overwrites dx (may be empty) and accumulates into dw and db (db may be empty), as llm.c's backward does:
  // an input gradient's first and only contribution needs no zeroing pass before it.
  virtual void linear_backward(const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& dout,
                               const Tensor& x, const Tensor& w) = 0;
  // One tile of a linear layer split along its output features (memory-centric tiling): w [W, IC] and b [W]
  // (or empty) are rows [first, first + W) of the whole layer's weight and bias, and out [N, OC] is the whole
  // layer's output, of which only the columns [first, first + W) are written: x w^T (+ b). On the CPU each
  // value is bit for bit what linear_forward with the whole weight writes there, at the current thread count
  // (the tiles' boundaries multiples of 16 and tiles at least 32 wide always qualify; where Eigen's kernels
  // cannot be reproduced it throws std::invalid_argument). The CUDA backend computes the same math without
  // that promise: cuBLASLt chooses its algorithm by the GEMM's shape, which a tile changes.
  virtual void linear_forward_columns(const Tensor& out, int64_t first, const Tensor& x, const Tensor& w,
                                      const Tensor& b) = 0;
  // The backward of linear_forward_columns, dout [N, OC] being the whole layer's: accumulates into dw [W, IC]
  // and db [W] (may be empty) exactly what linear_backward adds to rows [first, first + W) (on the CPU, bit
  // for bit), and into dx [N, IC] (may be empty) this tile's part dout[:, first:first+W] w of the input
  // gradient, which summed over the tiles equals linear_backward's within rounding.
  virtual void linear_backward_columns(const Tensor& dx, const Tensor& dw, const Tensor& db,
                                       const Tensor& dout, int64_t first, const Tensor& x,
                                       const Tensor& w) = 0;
  // What attention_forward keeps for attention_backward (kernels/attention_residual.h), which decides the
  // shape of its `att` residual: kProbabilities [B, NH, T, T], kLogSumExp [B, NH, T]. The layer loop
  // allocates it by this answer, and the activation counts follow the target backend's.
  virtual AttentionResidual attention_residual() const { return AttentionResidual::kProbabilities; }
  // Causal multi-head attention over qkv [B, T, 3C] into out [B, T, C]. att is the residual kept for the
  // backward: with kProbabilities [B, NH, T, T], the softmax probabilities before dropout (with dropout,
  // out = mask(att) V); with kLogSumExp [B, NH, T], the log of the sum of exp of each row's scaled causal
  // scores, before dropout (kernels/cpu/flash_attention.h's lse). Either way the backward regenerates the
  // dropout masks from the keys; probability (h, i, j) draws at element h*T*T + i*T + j.
  virtual void attention_forward(const Tensor& out, const Tensor& att, const Tensor& qkv,
                                 const DropoutMask* dropout) = 0;
  // Incremental decoding (a key/value cache): out [1, C] is the last row of causal attention over qkv [n,
  // 3C], the query of row n-1 against the keys and values of all n rows; att [NH, n] receives its
  // probabilities.
  virtual void attention_decode(const Tensor& out, const Tensor& att, const Tensor& qkv) = 0;
  // Overwrites dqkv, given the forward's qkv, its output out [B, T, C] and its residual att (the
  // shape attention_residual() says) and the same dropout. out is what a flash backward needs (rowsum(dout *
  // out) in place of rowsum(dA * A)); a backend keeping probabilities ignores it.
  virtual void attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                                  const Tensor& out, const Tensor& att, const DropoutMask* dropout) = 0;
  virtual void gelu_forward(const Tensor& out, const Tensor& x) = 0;
  // The MLP's first layer: pre = x w^T + b (what gelu_backward needs) and out = GELU(pre), in one op so that
  // a backend can apply GELU in the GEMM's epilogue (the CUDA backend does: one pass over pre instead of
  // two). By default linear_forward then gelu_forward, which is what the CPU runs.
  virtual void linear_gelu_forward(const Tensor& out, const Tensor& pre, const Tensor& x, const Tensor& w,
                                   const Tensor& b) {
    linear_forward(pre, x, w, b);
    gelu_forward(out, pre);
  }
  // Overwrites dx = gelu'(x) * dout.
  virtual void gelu_backward(const Tensor& dx, const Tensor& x, const Tensor& dout) = 0;
  // out = a + b (out may alias either).
  virtual void add(const Tensor& out, const Tensor& a, const Tensor& b) = 0;
  // x [B, n]: out = x * mask / (1 - p), the mask of element e of row b drawn at counter mask.element_offset
  // + e of keys[b]; may work in place. In attention, probability (h, i, j) is element h*T*T + i*T + j.
  virtual void dropout_forward(const Tensor& out, const Tensor& x, const DropoutMask& mask) = 0;
  virtual void dropout_backward(const Tensor& dx, const Tensor& dout, const DropoutMask& mask) = 0;
  // Over logits [N, Vp] of which the first V are real: probs = softmax, losses [N] = -log probs[target].
  virtual void cross_entropy_forward(const Tensor& losses, const Tensor& probs, const Tensor& logits,
                                     const Tensor& targets, int vocab) = 0;
  // dlogits = (probs - onehot) * dlosses, per row.
  virtual void cross_entropy_backward(const Tensor& dlogits, const Tensor& probs, const Tensor& targets,
                                      const Tensor& dlosses, int vocab) = 0;
  // The vocabulary-parallel cross-entropy, for ranks that each hold the columns [first, first + W) of the
  // logits: column j of logits [N, W] is vocabulary entry first + j, real when first + j < vocab (the
  // padding is ignored). Three ops; the caller all-gathers the stats between the first and the second.
  // Overwrites stats [N, 3] with, per row, the maximum m over the real columns (-inf if none), the sum s of
  // exp(z - m) over them (0 if none), and the target's logit when first <= targets[n] < min(first + W, vocab)
  // (else 0). targets [N] i32.
  virtual void cross_entropy_stats(const Tensor& stats, const Tensor& logits, const Tensor& targets,
                                   int64_t first, int vocab) = 0;
  // From stats [G, N, 3] (the G ranks' stats in rank order): M = max_g m_g, S = sum_g s_g exp(m_g - M) (ranks
  // with s_g = 0 skipped) and the target's logit z_y = sum_g of the third entries. Overwrites losses [N] =
  // log S - (z_y - M) and probs [N, W] = exp(z - M) * (1 / S) in the real columns, 0 in the padding; probs
  // may alias logits. With G = 1, first = 0 and W = Vp this is cross_entropy_forward (within rounding).
  virtual void cross_entropy_merge(const Tensor& losses, const Tensor& probs, const Tensor& logits,
                                   const Tensor& stats, int64_t first, int vocab) = 0;
  // Overwrites dlogits [N, W] = (probs - onehot(targets[n] - first)) * dlosses[n] in the real columns (the
  // one-hot term only on the rank whose columns hold the target), 0 in the padding; dlogits may alias probs.
  // With first = 0 and W = Vp, cross_entropy_backward bit for bit.
  virtual void cross_entropy_backward_columns(const Tensor& dlogits, const Tensor& probs,
                                              const Tensor& targets, const Tensor& dlosses, int64_t first,
                                              int vocab) = 0;
  // The LM head's classifier in chunks of rows (llm.c's fused classifier), never holding the whole logits
  // [N, Vp], which at GPT-2's vocabulary outweigh every other activation. lnf [N, C] (or [B, T, C]) is the
  // final LayerNorm's output, wte [Vp, C] the tied output projection, targets N i32 ([N] or [B, T]), losses
  // and dlosses N values; scratch [R, Vp] holds one chunk's logits (R rows at a time; the last chunk may be
  // shorter). Column j >= vocab is padding, as in cross_entropy_forward and _backward: probability 0,
  // gradient 0.
  // Overwrites losses [N] with each row's cross-entropy of softmax(lnf wte^T).
  virtual void classifier_forward(const Tensor& losses, const Tensor& lnf, const Tensor& wte,
                                  const Tensor& targets, int vocab, const Tensor& scratch);
  // Recomputes each chunk's logits and their softmax (losses [N] are written again, the forward's values),
  // turns them into dlogits = (probs - onehot) * dlosses in place, overwrites dlnf [N, C] = dlogits wte and
  // accumulates dwte [Vp, C] += dlogits^T lnf (as linear_backward does).
  virtual void classifier_backward(const Tensor& dlnf, const Tensor& dwte, const Tensor& losses,
                                   const Tensor& lnf, const Tensor& wte, const Tensor& targets,
                                   const Tensor& dlosses, int vocab, const Tensor& scratch);
  // Whether the layer loop should use the two ops above for its head (model/layers.h): true where the
  // backend fuses them (CUDA). The defaults (kernels/ops.cc) are the readable reference, built from
  // linear_forward, cross_entropy_forward / _backward and linear_backward on each chunk; they save the
  // memory but not the passes over it, so the CPU keeps the whole-tensor head and its bits.
  virtual bool fuses_classifier() const { return false; }
  // Sum of the elements, accumulated in double in index order.
  virtual double sum(const Tensor& x) = 0;

  // Engine ops, on fp32 state and fp32/fp16/bf16 compute weights and wire buffers (and on fp64 ones, for the
  // double-precision gradient checks, where a backend supports fp64).
  // dst = round_to_dst_dtype(src * scale); between fp32, fp16 and bf16 (widening is exact), or fp64 to fp64;
  // fp16 to fp16 and bf16 to bf16 with scale 1 (a copy).
  virtual void cast(const Tensor& dst, const Tensor& src, float scale = 1.0f) = 0;
  // dst += src (fp32, or fp64 to fp64).
  virtual void add_into(const Tensor& dst, const Tensor& src) = 0;
  // Sum of squares in double, in fixed-size chunks summed in a fixed order (independent of threads).
  virtual double sum_of_squares(const Tensor& x) = 0;
  virtual bool all_finite(const Tensor& x) = 0;
  // One AdamW update of param, m and v from grad * grad_scale; step counts applied updates from 1.
  virtual void adamw(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                     const AdamWHyper& hyper, int64_t step, float grad_scale) = 0;
  // adamw, then compute = the updated param rounded to compute's dtype (fp32, fp16 or bf16) exactly as
  // cast(compute, param) rounds it: the optimizer step and the compute weights' refresh (zero/optimizer.h)
  // in one pass over param where a backend fuses them (CUDA does into fp16/bf16). By default the two ops,
  // which is what the CPU runs.
  virtual void adamw_with_copy(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                               const AdamWHyper& hyper, int64_t step, float grad_scale,
                               const Tensor& compute) {
    adamw(param, grad, m, v, hyper, step, grad_scale);
    cast(compute, param);
  }
  // Block quantization (kernels/quant): `count` slices of slice_len elements of x (fp32/fp16/bf16) into
  // `out` (bytes), blocks restarting at each slice. Returns whether every value was finite.
  virtual bool quantize(const Tensor& out, const Tensor& x, int64_t slice_len, int64_t count, int bits,
                        int block) = 0;
  // quantize() of x (fp32) plus the error kept in `error` (int8 slices of the same blocks), which is replaced
  // by the new kept error: qgZ's LoCo error feedback (kernels/quant/quantize.h), beta in [0, 1).
  virtual bool quantize_with_feedback(const Tensor& out, const Tensor& x, const Tensor& error,
                                      int64_t slice_len, int64_t count, int bits, int block, float beta) = 0;
  // The inverse into out, each value rounded through round_to (fp32, fp16 or bf16); out is fp32, or round_to
  // itself (the half layer loop's weights, loop.h).
  virtual void dequantize(const Tensor& out, const Tensor& in, int64_t slice_len, int64_t count, int bits,
                          int block, DType round_to) = 0;
  // The inverse added into acc (fp32, count * slice_len values): slice i of in into acc[i * slice_len, ...),
  // one fp32 addition per value (never fused): qgZ's sums.
  virtual void dequantize_add(const Tensor& acc, const Tensor& in, int64_t slice_len, int64_t count, int bits,
                              int block) = 0;
  // x (fp32) /= divisor, one correctly rounded division per value.
  virtual void divide(const Tensor& x, float divisor) = 0;
};

}  // namespace gpt
