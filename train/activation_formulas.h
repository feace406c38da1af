// Activation memory per tensor-parallel rank, two ways, as pure functions of the shape and the setup:
//   - the paper's (Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models"):
//     Section 4.1's tensors of a transformer layer at 2 bytes per stored activation and 1 per dropout mask,
//     its closed forms per layer (sbh(34 + 5as/h), sbh(10 + 24/t + 5as/(ht)), ...) and Section 4.3's input
//     and output layers;
//   - restated for what our backend stores (model/layers.h, model/loop.h): the same list tensor by tensor in
//     fp32, masks regenerated from their keys (never stored), plus our own working buffers (backward scratch,
//     the head's, sequence parallelism's), counted per kept activation set as the layer loop allocates them.
//     It equals LayerLoop::activation_bytes, which is what the arena's "activations" category holds (but for
//     each allocation's rounding up to the arena's alignment).
// docs/activations.md explains the table term by term; bench/activations measures both against the arena.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/attention_residual.h"
#include "model/config.h"
#include "model/recompute.h"

namespace gpt {

// The paper's symbols: s sequence length, b micro-batch, h hidden size, a attention heads, L layers, v the
// vocabulary as the output layer holds it (ours: the padded vocabulary, as Megatron's is padded too).
struct ActivationShape {
  int64_t s = 0, b = 0, h = 0, a = 0, L = 0, v = 0;
};
ActivationShape activation_shape(const GPTConfig& config, int micro_batch);

// t: tensor-parallel size. Sequence parallelism only means something at t > 1 (Megatron turns it off at 1).
struct ActivationSetup {
  int t = 1;
  bool sequence_parallel = false;
  Recompute recompute;
  // Partitioned activation checkpoints (--distribute-saved-activations; t > 1, full recomputation, no SP):
  // each chunk's input kept as 1/t per rank, the two in use whole (model/loop.h).
  bool distribute_saved_activations = false;
  // The fused classifier (a backend that fuses_classifier(), kernels/ops.h; t = 1 only): the head holds a
  // chunk of this many rows of logits (model/config.h, classifier_chunk_rows) instead of the whole s*b rows.
  // 0: the whole logits, as the CPU backend and every tensor-parallel head keep them.
  int64_t classifier_rows = 0;
  // What the backend's attention keeps for its backward (Ops::attention_residual): the probabilities
  // [b,a/t,s,s] (the CPU backend's, and the CUDA backend's today) or one log-sum-exp per row [b,a/t,s] (a
  // flash-attention backend's). Our count only; the paper's keeps the probabilities.
  AttentionResidual attention_residual = AttentionResidual::kProbabilities;
  bool fused_classifier() const { return classifier_rows > 0 && t == 1; }
  bool partitioned() const {
    return distribute_saved_activations && t > 1 && recompute.is_full() && !sequence_parallel;
  }
};

// How one of Section 4.1's tensors divides among the t ranks of a tensor-parallel group.
enum class TermSplit {
  kSequence,       // LayerNorm/dropout region: every rank holds it whole, 1/t of the sequence with SP
  kTensor,         // inside the column/row-parallel pair: 1/t of the columns (or heads) on each rank
  kAttentionCore,  // split by heads like kTensor, and what selective recomputation does not keep
};

// One tensor of a transformer layer: the paper's bytes and ours, per layer, at t = 1.
struct LayerTerm {
  std::string block;         // "attention", "MLP", "LayerNorm"
  std::string paper_tensor;  // as Section 4.1 names it
  double paper_bytes = 0;    // 2 per activation, 1 per dropout mask
  std::string our_tensor;    // BlockActivations member (layers.h), or why we store nothing
  double our_bytes = 0;      // fp32: 4 per element; 0 when not stored
  TermSplit split = TermSplit::kSequence;
  // The block input: the one tensor full recomputation keeps (as its checkpoint); ours lives in the loop's
  // residual slots, not in an activation set.
  bool block_input = false;
  // Kept in fp32 beside fp16/bf16 activations (the ops' mixed-precision contract, kernels/ops.h): LayerNorm's
  // statistics, attention's log-sum-exp.
  bool statistics = false;
};

// Section 4.1's list in its order, each with what we store for it, and our LayerNorm statistics (which the
// paper does not count: its LayerNorm backward recomputes them). For the softmax output we store the
// backend's attention residual: 4as^2b bytes of probabilities, or 4asb of log-sum-exp.
std::vector<LayerTerm> layer_terms(const ActivationShape& shape,
                                   AttentionResidual residual = AttentionResidual::kProbabilities);

// Bytes of one term per rank under a setup (per layer; full recomputation keeps only the block input).
double paper_term_bytes(const LayerTerm& term, const ActivationSetup& setup);
double our_term_bytes(const LayerTerm& term, const ActivationSetup& setup);

// The paper's per-layer closed forms: sbh(34 + 5as/h) at t = 1; sbh(10 + 24/t + 5as/(ht)) with tensor
// parallelism; sbh/t (34 + 5as/h) with sequence parallelism too; selective drops the 5as/h part (sbh(10 +
// 24/t), 34sbh/t); full keeps 2sbh (2sbh/t with sequence parallelism).
double paper_layer_bytes(const ActivationShape& shape, const ActivationSetup& setup);

// Section 4.3: the input embedding's dropout mask, sbh; the output layer's LayerNorm input 2sbh, the
// projection's input 2sbh and the fp32 logits 4sbv/t (the first three /t with sequence parallelism, as in
// the paper; without it they are replicated, our reading).
double paper_input_output_bytes(const ActivationShape& shape, const ActivationSetup& setup);

// L layers plus Section 4.3's input and output terms (pipeline size 1).
double paper_model_bytes(const ActivationShape& shape, const ActivationSetup& setup);

// One line of the restated count: `count` tensors of `bytes_each` bytes.
struct RestatedLine {
  std::string group;         // "layers" (Section 4.1), "input/output" (Section 4.3), "working" (ours only)
  std::string our_tensor;    // the loop's tensor (layers.h, loop.h)
  std::string paper_tensor;  // what it stands for in the paper, or "-" for our working buffers
  int64_t count = 0;
  int64_t bytes_each = 0;
  int64_t bytes() const { return count * bytes_each; }
};

struct RestatedActivations {
  std::vector<RestatedLine> lines;
  int64_t residual_slots = 0;   // kept block inputs and the final output ([b, s or s/t, h] each)
  int64_t activation_sets = 0;  // BlockActivations the loop allocates
  int64_t total_bytes = 0;
  int64_t bytes_of(const std::string& group) const;
};

// What LayerLoop<Real> allocates in the "activations" category on one rank, tensor by tensor, with
// element_bytes the size of its compute dtype: sizeof(Real), or 2 for the half layer loop, whose statistics
// (LayerNorm's, the log-sum-exp, the losses) and LayerNorm gradient partials stay 4 (statistics_bytes). The
// setup must be one the loop accepts (t divides a, h, v; s with SP).
RestatedActivations restated_activations(const ActivationShape& shape, const ActivationSetup& setup,
                                         int element_bytes = 4);
// The bytes of a statistic next to activations of element_bytes: 4 beside fp16/bf16's 2, else the same.
inline int statistics_bytes(int element_bytes) {
  return element_bytes == 2 ? 4 : element_bytes;
}

}  // namespace gpt
