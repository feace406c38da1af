// The one layer loop of GPT-2: the forward and the backward over gather units (the embeddings, each block,
// the final LayerNorm with the tied head), written once and driven by two small interfaces:
//   - a WeightSource hands the loop unit u's full weights for a pass and is told when the loop is done with
//     them (the single-process model hands out slices of its flat vector; ZeRO stage 3 gathers shards);
//   - a GradientSink gives the loop a buffer for unit u's gradient and is told when it is final for this
//     micro-step (the single-process model accumulates in place; ZeRO reduces it over ranks).
// The loop owns the activations of one micro-batch and knows the model's wiring: wte's gradient stays open
// from the head (tied output projection) to the embedding, the head needs ln_f and wte together, and with
// activation checkpointing only block inputs are kept and each block is recomputed in the backward with the
// weights of that same acquisition. Whoever drives it never needs to know how a block is wired.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/config.h"
#include "model/layers.h"
#include "model/params.h"

namespace gpt {

enum class Pass { kForward, kBackward };

template <typename Real>
class WeightSource {
 public:
  virtual ~WeightSource() = default;
  // A pass begins: the loop will acquire exactly `schedule`'s units, in that order (a gatherer prefetches
  // from it).
  virtual void begin_pass(Pass pass, const std::vector<int>& schedule) = 0;
  // Unit u's full weights (model layout, table.units[u].numel elements), valid until release(u).
  virtual const Real* acquire(int unit) = 0;
  virtual void release(int unit) = 0;
};

template <typename Real>
class GradientSink {
 public:
  virtual ~GradientSink() = default;
  // Where unit u's gradient of this micro-step is accumulated (model layout, numel elements, added into).
  virtual Real* open(int unit) = 0;
  // Unit u's gradient is final for this micro-step: the loop does not touch open(u)'s buffer again.
  virtual void ready(int unit) = 0;
};

// The order of units in each pass, and the order in which gradients become final.
struct LoopSchedule {
  std::vector<int> forward;    // wte, wpe, h.0 .. h.{L-1}, ln_f
  std::vector<int> backward;   // ln_f and wte (the head), then h.{L-1} .. h.0; the embedding needs no weights
  std::vector<int> gradients;  // ln_f, h.{L-1} .. h.0, wpe, wte: the reverse of the forward order
};
LoopSchedule loop_schedule(const ParamTable& table);

template <typename Real>
class LayerLoop {
 public:
  // Activations for micro-batches of B sequences of config.seq_len tokens. With checkpoint_activations only
  // the block inputs are kept between forward and backward.
  LayerLoop(const GPTConfig& config, int micro_batch, bool checkpoint_activations);

  const LoopSchedule& schedule() const { return schedule_; }

  // inputs and targets are [B, T] (targets may be null: the loss is 0 and logits() holds the logits). Returns
  // the mean loss over the B*T tokens. dropout's windows are copied, so the backward can replay its masks.
  // keep_for_backward = false (evaluation) keeps only what the forward itself needs.
  Real forward(WeightSource<Real>& weights, const int32_t* inputs, const int32_t* targets,
               const Dropout& dropout, bool keep_for_backward);
  // Gradients of mean loss * loss_multiplier into the sink, unit by unit, for the preceding forward (which
  // must have had targets and keep_for_backward).
  void backward(WeightSource<Real>& weights, GradientSink<Real>& gradients, Real loss_multiplier);

  // [B*T, Vp] logits after a forward without targets (probabilities after one with targets).
  const Real* logits() const { return head_.probs.data(); }
  // [B*T] per-token losses after a forward with targets.
  const Real* token_losses() const { return head_.losses.data(); }
  size_t activation_bytes() const;

 private:
  // Returns wte's gradient buffer, left open for the embedding.
  Real* backward_head(WeightSource<Real>& weights, GradientSink<Real>& gradients, Real dloss_per_token);
  void backward_block(WeightSource<Real>& weights, GradientSink<Real>& gradients, int layer);
  Real* residual(int layer) { return residual_.data() + size_t(layer) * B_ * T_ * config_.hidden; }
  Dropout dropout() const;

  GPTConfig config_;
  ParamTable table_;
  LoopSchedule schedule_;
  int B_, T_;
  bool checkpoint_;
  std::vector<Real> residual_;                  // (L+1) x [B*T, C]: every block's input and the final output
  std::vector<BlockActivations<Real>> blocks_;  // L, or 1 with checkpointing (and for evaluation)
  BlockScratch<Real> scratch_;
  HeadActivations<Real> head_;
  std::vector<Real> dresidual_;
  std::vector<Real> recompute_out_;  // checkpointing: the recomputed block's output, discarded
  // The last forward's batch and dropout, for the backward.
  std::vector<int32_t> inputs_, targets_;
  std::vector<int64_t> windows_;  // empty when it had no dropout
  Dropout dropout_;
};

}  // namespace gpt
