// The one layer loop of GPT-2: the forward and the backward over gather units (the embeddings, each block,
// the final LayerNorm with the tied head), written once and driven by two small interfaces:
//   - a WeightSource hands the loop unit u's full weights for a pass and is told when the loop is done with
//     them (the single-process model hands out slices of its flat vector; ZeRO stage 3 gathers shards);
//   - a GradientSink gives the loop a buffer for unit u's gradient and is told when it is final for this
//     micro-step (the single-process model accumulates in place; ZeRO reduces it over ranks).
// The loop owns the activations of one micro-batch and knows the model's wiring: wte's gradient stays open
// from the head (tied output projection) to the embedding, the head needs ln_f and wte together, and with
// activation checkpointing only block inputs are kept and each block is recomputed in the backward with the
// weights of that same acquisition (recompute.h says which activations each granularity keeps). Whoever
// drives it never needs to know how a block is wired.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "model/config.h"
#include "model/layers.h"
#include "model/params.h"
#include "model/pipeline.h"
#include "model/recompute.h"

namespace gpt {

enum class Pass { kForward, kBackward };

template <typename Real>
class WeightSource {
 public:
  virtual ~WeightSource() = default;
  // A pass begins: the loop will acquire exactly `schedule`'s units, in that order (a gatherer prefetches
  // from it).
  virtual void begin_pass(Pass pass, const std::vector<int>& schedule) = 0;
  // Unit u's full weights (model layout, table.units[u].numel elements), valid until release(u), in the
  // loop's compute dtype (LayerLoop::compute_dtype()).
  virtual WeightView acquire(int unit) = 0;
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
//   forward:   wte, wpe, h.0 .. h.{L-1}, ln_f
//   backward:  ln_f and wte (the head), then h.{L-1} .. h.0; the embedding needs no weights
//   gradients: ln_f, h.{L-1} .. h.0, wpe, wte: the reverse of the forward order
// With full recomputation (recompute.h) a chunk of blocks [a, b] is walked as a, a+1, .., b-1 (their
// forwards again, each acquired and released), then b (recomputed and differentiated with the weights of one
// acquisition), then b-1 .. a; a chunk of one block is acquired once.
// A tiled block (params.h, BlockUnits) is acquired as its five small units, held for the whole block, then
// each matrix's tiles in turn: qkv, attention projection, fc, MLP projection in the forward; in the backward
// the same walk without the MLP projection when the block is the last of a recomputed chunk (its output is
// never read), then the matrices in reverse order (MLP projection .. qkv). Each tile's gradient is final
// right after its tile's backward; the small units' follow at the block's end, in reverse unit order.
struct LoopSchedule {
  std::vector<int> forward;
  std::vector<int> backward;
  std::vector<int> gradients;
};
// For a model of num_units gather units (the table of params.h at this tile factor).
// With `chunk`, a pipeline stage's part (model/pipeline.h): only its layers, wte and wpe where it has the
// embedding, ln_f and wte where it has the head.
LoopSchedule loop_schedule(int num_units, int tile_factor, const Recompute& recompute,
                           const std::optional<PipelineChunk>& chunk = std::nullopt);

template <typename Real>
class LayerLoop {
 public:
  // Activations for micro-batches of B sequences of config.seq_len tokens, allocated from `arena` (over the
  // memory of `ops`' device) and computed through `ops`; `recompute` says which are kept between forward and
  // backward. tile_factor > 1: memory-centric tiling (params.h), the weight source hands out tiles.
  // tensor_parallel: the group this rank computes each layer with (tensor_parallel.h; its buffers are
  // allocated here); the weight source then hands out this rank's slices (make_param_table's TensorSlice).
  // chunk: a pipeline stage's part of the model (model/pipeline.h; with full recomputation, the chunks of
  // blocks recomputed together are counted from the chunk's first layer, as Megatron counts them): the
  // loop runs its layers only, the embedding and the head where the chunk has them; without the embedding,
  // its input comes in through chunk_input() and its input's gradient goes out through boundary_gradient(),
  // and without the head, the other way round (chunk_output(), boundary_gradient()). Units keep the whole
  // model's indices.
  // compute: the dtype of the activations and of the weights the source hands out; Real (the dtype of the
  // gradients and the loss) unless the backend takes fp16 or bf16 in the mixed-precision contract
  // (kernels/ops.h, Ops::compute_dtype): the half layer loop, with parameter gradients still in Real.
  LayerLoop(const GPTConfig& config, int micro_batch, const Recompute& recompute, Ops& ops, Arena& arena,
            int tile_factor = 1, const TensorParallel& tensor_parallel = TensorParallel{},
            const std::optional<PipelineChunk>& chunk = std::nullopt, DType compute = dtype_of<Real>());

  const ParamTable& table() const { return table_; }
  DType compute_dtype() const { return compute_; }

  const LoopSchedule& schedule() const { return schedule_; }

  // inputs and targets are [B, T] host arrays (targets may be null: the loss is 0 and the head's logits stay
  // in head().probs). Returns
  // the mean loss over the B*T tokens. dropout's windows are copied, so the backward can replay its masks.
  // keep_for_backward = false (evaluation) keeps only what the forward itself needs.
  Real forward(WeightSource<Real>& weights, const int32_t* inputs, const int32_t* targets,
               const Dropout& dropout, bool keep_for_backward);
  // Gradients of mean loss * loss_multiplier into the sink, unit by unit, for the preceding forward (which
  // must have had targets and keep_for_backward).
  void backward(WeightSource<Real>& weights, GradientSink<Real>& gradients, Real loss_multiplier);

  // The head's tensors: probs [B*T, Vp] holds the logits after a forward without targets (probabilities after
  // one with targets; with tensor parallelism this rank's Vp/t columns), losses [B*T] the per-token losses.
  // A backend that fuses_classifier() (kernels/ops.h) computes the losses in chunks of logits and keeps no
  // probabilities: probs is allocated by the first forward without targets, and not updated by one with.
  const HeadActivations& head() const { return head_; }
  size_t activation_bytes() const;

  const PipelineChunk& chunk() const { return chunk_; }
  int micro_batch() const { return B_; }
  // [B,T,C] (T/t with sequence parallelism): the chunk's input, which a chunk without the embedding reads in
  // the forward (the previous stage's output), and its output after the forward.
  Tensor chunk_input() const { return residual(chunk_.first_layer); }
  Tensor chunk_output() const { return residual(chunk_.end_layer); }
  // [B,T,C]: before the backward of a chunk without the head, its output's gradient (set by the caller);
  // after the backward of one without the embedding, its input's gradient.
  Tensor boundary_gradient() const { return dresidual_; }

 private:
  // Returns wte's gradient buffer, left open for the embedding.
  Real* backward_head(WeightSource<Real>& weights, GradientSink<Real>& gradients, Real dloss_per_token);
  // What block `layer`'s forward leaves in residual(layer + 1): kPending (its consumer's LayerNorm adds the
  // block's r2 in its own op, the fused residual) unless a pipeline stage sends it or its checkpoint is kept
  // away before the next block runs (keep_checkpoint copies the sum).
  BlockOutput block_output(int layer) const;
  // Block `layer`'s forward into `acts`, from residual(layer) to residual(layer + 1). input_addend is what
  // the previous block's forward returned: empty, or its r2 still to be added to residual(layer). Returns
  // acts.residual2 where the output is left pending (block_output), else an empty tensor.
  Tensor forward_block(WeightSource<Real>& weights, int layer, BlockActivations& acts, const Dropout& drop,
                       const Tensor& input_addend);
  // recompute: the block is the last of a recomputed chunk, its forward runs again first (with
  // input_addend, as forward_block's).
  void backward_block(WeightSource<Real>& weights, GradientSink<Real>& gradients, int layer, bool recompute,
                      const Tensor& input_addend);
  void backward_tiled_block(WeightSource<Real>& weights, GradientSink<Real>& gradients, int layer,
                            bool recompute, const Tensor& input_addend);
  // [B,T,C] ([B,T/t,C] with sequence parallelism): block `layer`'s input (layer L: the final output)
  Tensor residual(int layer) const;
  // Checkpoints kept away from the residual slots (partitioned over the group, or in host memory): block
  // `layer`'s input, or this rank's 1/t of it, is kept after the forward computed it, and put back into
  // residual(layer) (gathered from the group when partitioned) before its chunk is recomputed.
  Tensor own_part(int layer) const;      // the part of residual(layer) this rank keeps
  Tensor stored_part(int row) const;     // a row of partitions_
  void* host_part(int slot, int64_t n);  // slot `slot` of host_checkpoints_, n elements each
  void keep_checkpoint(int layer);
  void restore_checkpoint(int layer);
  // Where block `layer` keeps its activations for the backward (a recomputed chunk's blocks share theirs).
  BlockActivations& activations(int layer) { return blocks_[block_slot_[layer - chunk_.first_layer]]; }
  Dropout dropout() const;

  GPTConfig config_;
  ParamTable table_;
  LoopSchedule schedule_;
  PipelineChunk chunk_;  // the whole model unless constructed with a chunk
  int B_, T_;
  Recompute recompute_;
  Ops& ops_;
  Arena& arena_;  // the fused head's probs, allocated by the first forward without targets
  DType compute_;
  TensorParallel tp_;
  // Block inputs (and the final output) in slots of [B,T,C]: residual_slot_[l - first] for l in first..end
  // of the pipeline chunk (0..L for the whole model). With full recomputation the inner inputs of a chunk
  // of blocks are not kept: the chunks share slots for them.
  Tensor residual_;
  std::vector<int> residual_slot_;
  // Checkpoints kept away: the kept parts [chunks, n] on the device (partitions_) or in host memory
  // (host_checkpoints_, with one device part for the way back when partitioned), n = B*T*C or B*T*C/t;
  // partition_slot_[l - first] for a chunk's first block (-1 for the others). The chunks' whole inputs take
  // two residual slots in turn.
  Tensor partitions_;
  std::vector<std::byte> host_checkpoints_;
  std::vector<int> partition_slot_;
  bool partitioned_ = false;
  // Activation sets: block_slot_[l - first] for l in first..end-1. Every kept block has its own; the blocks
  // of a recomputed chunk share one set per position in the chunk. Selective recomputation: all sets share
  // the first's attention probabilities.
  std::vector<BlockActivations> blocks_;
  std::vector<int> block_slot_;
  BlockScratch scratch_;
  HeadActivations head_;
  Tensor dresidual_;         // [B,T,C]
  Tensor recompute_out_;     // full recomputation: the output of a chunk's last block, discarded
  Tensor inputs_, targets_;  // [B,T] int32: the last forward's tokens, for the backward
  bool has_targets_ = false;
  // The last forward's dropout, for the backward; windows_ is empty when it had none.
  std::vector<int64_t> windows_;
  Dropout dropout_;
};

}  // namespace gpt
