// A whole GPT-2 over one flat parameter vector in one process: the single-process trainer, the gradient
// checks and the reference that multi-rank runs are compared with. It drives the one layer loop (loop.h)
// with the trivial weight source and gradient sink: slices of its flat vectors (the layout of params.h), on
// the CPU backend (its vectors are host memory).
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"
#include "model/layers.h"
#include "model/loop.h"
#include "model/params.h"
#include "tensor/arena.h"

namespace gpt {

template <typename Real>
class GPT2 {
 public:
  // Activations are sized for micro-batches of B sequences of config.seq_len tokens. tile_factor > 1 computes
  // the blocks' matrices tile by tile, as memory-centric tiling does (params.h); the flat layout is the same.
  GPT2(const GPTConfig& config, int micro_batch, int tile_factor = 1);

  const GPTConfig& config() const { return config_; }
  const ParamTable& table() const { return table_; }
  int micro_batch() const { return B_; }

  std::vector<Real> params;  // flat, table().total elements
  std::vector<Real> grads;   // same layout; backward accumulates here

  void init(uint64_t seed);
  void zero_grad();

  // Dropout probabilities and seed of the forwards that name their sequences' windows (below); 0 and 0, the
  // default, turn dropout off. See Dropout in layers.h for the masks.
  void set_dropout(double hidden, double attention, uint64_t seed);

  // inputs and targets are [B, T]. Returns the mean loss over the B*T tokens (0 without targets, which leaves
  // only the logits, see logits()). Never drops out (evaluation, gradient checks).
  Real forward(const int32_t* inputs, const int32_t* targets);
  // The training forward: as above, with set_dropout's dropout and masks keyed by windows [B], the global
  // stream index of each sequence (from the loader). windows = null is the forward without dropout.
  Real forward(const int32_t* inputs, const int32_t* targets, const int64_t* windows);
  // Accumulates d(objective)/d(params) into grads, where objective = mean loss * loss_multiplier (use 1/k for
  // k accumulated micro-batches, times a loss scale). Needs the preceding forward with targets, whose dropout
  // masks it replays.
  void backward(Real loss_multiplier = Real(1));

  // [B*T, Vp] logits after a forward without targets (probabilities after one with targets).
  const Real* logits() const { return static_cast<const Real*>(loop_.head().probs.data); }
  // [B*T] per-token losses after a forward with targets.
  const Real* token_losses() const { return static_cast<const Real*>(loop_.head().losses.data); }
  size_t activation_bytes() const { return loop_.activation_bytes(); }

 private:
  // The trivial weight source and gradient sink: slices of params and grads, accumulated in place.
  class Slices final : public WeightSource<Real>, public GradientSink<Real> {
   public:
    explicit Slices(GPT2& model) : model_(model) {}
    void begin_pass(Pass, const std::vector<int>&) override {}
    WeightView acquire(int unit) override { return model_.params.data() + offset(unit); }
    void release(int) override {}
    Real* open(int unit) override { return model_.grads.data() + offset(unit); }
    void ready(int) override {}

   private:
    int64_t offset(int unit) const { return model_.table_.units[unit].offset; }
    GPT2& model_;
  };

  GPTConfig config_;
  ParamTable table_;
  int B_;
  Arena arena_{"host"};  // the activations
  LayerLoop<Real> loop_;
  Slices slices_{*this};
  double hidden_dropout_ = 0, attention_dropout_ = 0;
  uint64_t dropout_seed_ = 0;
};

}  // namespace gpt
