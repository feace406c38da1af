// The ZeRO engine: owns every byte of model state on this rank and the schedule of a training step.
//
// State per rank, by stage (P = padded parameter count, W = data-parallel ranks):
//   stage 0  full fp32 master, Adam m and v, full compute weights, full fp32 gradients; one all-reduce of
//            the gradients at the accumulation boundary (plain data parallelism)
//   stage 1  master, m and v sharded (P/W each); full compute weights and gradients; at the boundary a
//            reduce-scatter of the gradients, then an all-gather of the updated compute-weight shards
//   stage 2  as stage 1, but gradients are reduce-scattered in buckets on every micro-step into an fp32
//            shard, so no rank holds full gradients
//   stage 3  as stage 2, and compute weights are sharded too: each unit is gathered before its forward and
//            again before its backward, and released after
// The model's one layer loop (model/loop.h) computes one unit at a time on full fp32 weights; the engine
// decides, once, where those weights come from and where the gradients go: the weight source and gradient
// sink of its stage (weight_sources.h, gradient_sinks.h).
//
// With tensor parallelism (Megatron) the world is t x d: each tensor-parallel group is t consecutive ranks
// inside one node, computing every layer together on its slices of the weights (model/params.h,
// TensorSlice), and the data-parallel group is the d ranks with the same tensor-parallel rank (stride t).
// Everything above applies to the data-parallel group, with P the slice's parameter count: each rank shards
// its tensor-parallel slice. The hpZ and qgZ groups are drawn from the data-parallel group's members on each
// node (L/t of them).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "kernels/ops.h"
#include "model/config.h"
#include "model/layers.h"
#include "model/loop.h"
#include "model/params.h"
#include "model/pipeline.h"
#include "tensor/arena.h"
#include "zero/config.h"
#include "zero/context.h"
#include "zero/events.h"
#include "zero/gradient_sinks.h"
#include "zero/loss_scaler.h"
#include "zero/offload_store.h"
#include "zero/optimizer_state.h"
#include "zero/partition.h"
#include "zero/weight_sources.h"

namespace gpt {

class ZeroEngine {
 public:
  // One micro-batch of this rank: inputs and targets [B, T], and each sequence's global window index (the
  // dropout masks are keyed by it).
  struct MicroBatch {
    const int32_t* inputs;
    const int32_t* targets;
    const int64_t* windows;
  };
  struct StepResult {
    double loss = 0;        // mean over the whole global batch
    double grad_norm = 0;   // global L2 norm before clipping, unscaled
    double loss_scale = 1;  // the scale this step's gradients carried
    bool skipped = false;   // an overflow on some rank: weights unchanged
    bool stop = false;      // some rank asked to stop (a signal): every rank sees it at the same step
    double forward_ms = 0, backward_ms = 0, optimizer_ms = 0;  // this rank's time in each part
    // A pipeline's stages, in stage order (empty at p = 1): each one's compute time this step (forward and
    // backward, waits for messages excluded) and the time its micro-batches took, first op to last message.
    // A stage's bubble is the share of the second the first leaves. (Host clocks: on a GPU they time the
    // queueing of the kernels, with the waits for the communicator between them.)
    std::vector<double> stage_busy_ms, stage_pipeline_ms;
  };
  struct MemoryLine {
    std::string state;    // "compute weights", "master", ...
    size_t bytes = 0;     // measured on this rank
    std::string formula;  // the ZeRO formula for the stage, e.g. "2P/W"
    double formula_bytes = 0;
    std::string tier =
        "device";  // where the formula's bytes live: "device", "cpu" or "nvme" (memory_model.h)
  };

  // A pipeline stage (zero/parallel_groups.h): the layout, this rank's stage, and its groups. The engine
  // then holds and trains only the stage's chunks of the model (model/pipeline.h, stage_param_table) and runs
  // each step's micro-batches in the 1F1B or the interleaved order (zero/pipeline_schedule.h), keeping an
  // activation set for each micro-batch in flight through each chunk, over the stage's data-parallel group:
  // either at any ZeRO stage (ZeRO++ too; interleaved, each chunk's backward is a micro-step of the
  // reducer's, whose buckets never span two chunks). On the CPU, and on a GPU over NCCL (written against the
  // CPU's tests; not yet run on a GPU).
  struct Pipeline {
    PipelineLayout layout;
    int stage = 0;
    comm::Communicator* group = nullptr;  // one rank per stage, this rank's tensor and data rank
    struct Links {  // a chunk's channels (ParallelGroups), null where it has no neighbour on that side
      comm::Communicator *forward_in = nullptr, *forward_out = nullptr, *backward_in = nullptr,
                         *backward_out = nullptr;
    };
    std::vector<Links> chunks;                // one per chunk of this stage, in order
    comm::Communicator* embedding = nullptr;  // the first and the last stage (the tied wte)
  };

  // dp: the data-parallel group. ops: the device seam's backend that holds and computes all model state
  // (null: the CPU's). tensor_parallel: this rank's tensor-parallel group, consecutive world ranks inside one
  // node (null: t = 1); config.sequence_parallel splits the sequence over it too. pipeline: this rank's
  // stage (null: p = 1).
  ZeroEngine(const GPTConfig& model, const ZeroConfig& config, int micro_batch, comm::Communicator& dp,
             uint64_t seed, Ops* ops = nullptr, comm::Communicator* tensor_parallel = nullptr,
             const Pipeline* pipeline = nullptr);
  ~ZeroEngine();

  // What the caller does after a step. kTrainStep promises that its next call is train_step, with nothing
  // in between that gathers or changes weights (an evaluation, a checkpoint load, a weight import). Stage 3
  // with overlap_comm (one pipeline stage, shards in memory) then updates the next forward's first unit
  // before the rest of the shard and posts its gather from there: it crosses while the rest updates, instead
  // of opening the next step, and is complete when the step returns (so the meter counts it in this step:
  // the first step of a run carries one more first-unit gather, the last one fewer). A step that is skipped
  // or stops posts nothing; should something else come first anyway, the gather is dropped (its bytes
  // wasted, nothing wrong).
  enum class NextCall { kUnknown, kTrainStep };
  // One optimizer step over this rank's micro-batches (the accumulation steps), at learning rate lr.
  // stop_request travels in the step's one agreement all-reduce, so all ranks learn of a stop at the same
  // step.
  StepResult train_step(const std::vector<MicroBatch>& micro_batches, double lr, bool stop_request = false,
                        NextCall next = NextCall::kUnknown);
  // Whether an engine of this configuration and pipeline depth posts the next forward's first gather from
  // the optimizer when told NextCall::kTrainStep (the planner's steady state assumes it).
  static bool gathers_ahead(const ZeroConfig& config, int pipeline_stages) {
    return config.stage == 3 && config.overlap_comm && pipeline_stages == 1 &&
           !config.offload.swaps_through_wire();
  }
  // Mean loss of one micro-batch per rank, averaged over ranks, without dropout or gradients (phase eval).
  double evaluate(const MicroBatch& micro_batch);

  const Partition& partition() const { return partition_; }
  // The data-parallel group's own topology: its d ranks, L/t of them per node (hpZ and qgZ use it).
  const comm::Topology& data_parallel_topology() const { return dp_topology_; }
  int tensor_parallel_size() const { return tp_comm_ ? tp_comm_->size() : 1; }
  int tensor_parallel_rank() const { return tp_comm_ ? tp_comm_->rank() : 0; }
  int data_parallel_rank() const { return dp_.rank(); }
  const ParamTable& table() const { return table_; }
  // The pipeline's split and this rank's stage (a one-stage layout and stage 0 at p = 1).
  PipelineLayout pipeline_layout() const { return pipeline_ ? pipeline_->layout : PipelineLayout{}; }
  int pipeline_stage() const { return pipeline_ ? pipeline_->stage : 0; }
  const GPTConfig& model() const { return model_; }
  const ZeroConfig& config() const { return config_; }
  const EventLog& events() const { return events_; }
  EventLog& events() { return events_; }
  std::vector<MemoryLine> memory() const;
  // The arenas behind memory(): device memory (model state, gradients, activations) and wire memory (what
  // the communicator sends and receives), each with its ledger by category.
  const Arena& device_arena() const { return arena_; }
  // The layer loop's compute dtype (layer_loop_compute, zero/context.h).
  DType compute_dtype() const { return loop_.compute_dtype(); }
  const Arena& wire_arena() const { return wire_arena_; }
  // Every activation set this rank keeps: one micro-batch's, times the micro-batches a pipeline stage keeps
  // in flight.
  size_t activation_bytes() const {
    size_t total = loop_.activation_bytes();  // chunks of different sizes keep different sets
    for (const auto& loop : extra_loops_) total += loop->activation_bytes();
    return total;
  }
  std::string memory_table() const;
  int64_t applied_steps() const { return applied_steps_; }
  const LossScaler& loss_scaler() const { return scaler_; }
  // The most bytes of hpZ secondaries this rank has held at once (payload, without allocation rounding).
  size_t hpz_secondary_peak_bytes() const;
  // ZeRO-Infinity's disk traffic so far on this rank (all zero without NVMe offload): bytes, time with the
  // disk busy, and time the engine waited for it (the rest of the busy time was hidden behind compute).
  offload::Swapper::Stats swap_stats() const {
    return offload_ ? offload_->swapper().stats() : offload::Swapper::Stats{};
  }
  // Lines for the start-up banner (for example that qgZ fell back to the ring on a single node).
  const std::vector<std::string>& notes() const { return notes_; }
  // The data-parallel group's topology in a world whose tensor-parallel groups are t consecutive ranks: its
  // rank `dp_rank` of world.world_size / t, with ranks_per_node / t members per node. Throws TopologyError
  // when t does not divide the ranks per node (our rule: a tensor-parallel group stays inside one node).
  // With p pipeline stages (t x d consecutive ranks each) the group is one stage's: over whole nodes, or all
  // on one node when a node holds several stages; another layout throws TopologyError too.
  static comm::Topology data_parallel_topology(const comm::Topology& world, int t, int dp_rank, int p = 1);

  // A test hook that sees (and may change) each unit's local gradient on this rank before it is reduced:
  // at stages 2 and 3 the unit's gradient of one micro-step, at stages 0 and 1 the accumulating full
  // gradient.
  using GradientHook = gpt::GradientHook;
  void set_gradient_hook(GradientHook hook) { gradients_->set_hook(std::move(hook)); }

  // Checkpoints and imports: this rank's optimizer state (flat shard layout; the whole padded vector at
  // stage 0), streamed through host memory in chunks so that no more than a sub-group's worth is ever held
  // there (the state may live on NVMe). visit(begin, n, master, m, v): flat shard elements [begin, begin+n).
  using StateChunk = OptimizerState::HostChunk;
  // Hands each chunk to `read` (in shard order).
  void read_state(const StateChunk& read);
  // Hands each chunk, zero-filled, to `fill`, stores what it wrote, then recomputes the compute weights.
  void write_state(const StateChunk& fill);
  int shard_index() const { return partition_.num_shards() == 1 ? 0 : dp_.rank(); }
  void set_training_state(int64_t applied_steps, const LossScaler::State& scaler);
  // Replaces the weights with the whole model's (make_param_table(model())'s layout, e.g. from an llm.c file)
  // and zeroes Adam's moments and the step count: each rank cuts its tensor-parallel slice and pipeline stage
  // out of it and copies the ranges it owns.
  void load_model_weights(const float* whole_model);
  // Calls copy(model_begin, model_end, at) for each model-layout range this rank owns within flat shard
  // elements [begin, begin+n): its values sit at index `at` of the chunk.
  void for_each_owned_range(
      int64_t begin, int64_t n,
      const std::function<void(int64_t model_begin, int64_t model_end, int64_t at)>& copy) const;

  // LoCo's kept errors on this rank (qgZ with zeropp_loco_param on two or more nodes; empty otherwise): a
  // host copy for checkpoints, and its restore (the same size, from a run with the same world and buckets).
  std::vector<uint8_t> feedback_state() const;
  size_t feedback_bytes() const;
  std::string feedback_layout() const;
  void restore_feedback(const std::vector<uint8_t>& bytes);

  // The full fp32 master weights in the model layout (this rank's tensor-parallel slice at t > 1), gathered
  // from every rank of the data-parallel group (for tests and export).
  std::vector<float> gather_master();

 private:
  double forward(const MicroBatch& mb, bool training, comm::Phase phase, LayerLoop<float>* loop = nullptr);
  // A pipeline stage's part of a step: its forwards and backwards in the 1F1B order, the activations and
  // their gradients received from and sent to the neighbouring stages. Returns the sum of the micro-batches'
  // losses on the last stage, 0 on the others.
  double run_pipeline(const std::vector<MicroBatch>& micro_batches, double loss_scale, StepResult& result);
  // Megatron's scatter-gather between stages, at t > 1 without sequence parallelism (where every
  // tensor-parallel rank holds the whole boundary tensor; with it each holds its own sequence part, all it
  // sends): each rank sends only its 1/t of a boundary tensor, and the receiving stage's ranks all-gather
  // the parts inside their tensor group, inside the node, so each byte crosses between stages once.
  bool scatter_gathers() const;
  // The part of a boundary tensor this rank sends and receives: all of it, or its 1/t when scatter_gathers.
  Tensor boundary_part(const Tensor& whole) const;
  // Sends this rank's part of a boundary tensor to the neighbouring stage over `channel`, staged in `wire`
  // (which the message holds until the request completes); receives one from it (and all-gathers the parts).
  comm::Request send_boundary(comm::Communicator& channel, const Tensor& whole, WireStaging& wire);
  void receive_boundary(comm::Communicator& channel, const Tensor& whole);
  // The first and the last stage sum their halves of the tied wte's gradient, so both apply one update.
  void sum_tied_embedding();
  // The last stage's wte copy is the first stage's: the gradient norm counts it there only.
  double tied_copy_sum_of_squares();
  // Sums values over the whole world: the data-parallel group, then the tensor-parallel group.
  void sum_over_world(float* values, int n, float scale, comm::Phase phase);
  // The dropout of a training micro-batch (masks keyed by seed and window), or none for evaluation.
  Dropout dropout_for(const MicroBatch& mb, bool training) const;
  void
  create_zeropp_groups();  // hpZ group; the node and cross-node groups of qgZ and the hierarchical gather
  bool reduces_by_qgz() const {  // qgZ on two or more nodes (one node: the ring)
    return config_.quantized_gradients && dp_topology_.num_nodes() >= 2;
  }
  bool gathers_hierarchically() const {  // zero_hierarchical_allgather where it changes the route
    return config_.hierarchical_allgather && config_.stage == 3 && dp_topology_.num_nodes() >= 2 &&
           dp_topology_.ranks_per_node >= 2;
  }
  bool gathers_ahead() const { return gathers_ahead(config_, pipeline_ ? pipeline_->layout.stages : 1); }
  bool local_overflow();
  double local_sum_of_squares();
  // LoCo's kept errors to zero, when there are any.
  void reset_feedback();
  // AdamW on this rank's shard, then the compute weights recomputed from the new master; gather_ahead: the
  // next forward's first unit first, its gather posted before the rest is updated.
  void update_weights(double lr, float grad_scale, bool gather_ahead);
  Tensor state_tensor(float* data) const;  // shard_total fp32 elements on the device

  GPTConfig model_;
  ZeroConfig config_;
  comm::Communicator& dp_;
  comm::Communicator* tp_comm_;  // null at t = 1
  comm::Topology dp_topology_;
  uint64_t seed_;
  ParamTable table_;
  Partition partition_;
  std::vector<std::string> unit_names_;
  Ops& ops_;
  Arena arena_;       // device memory: model state, gradients, activations
  Arena wire_arena_;  // wire memory: what the communicator sends and receives
  EventLog events_;
  EngineContext context_{ops_, arena_, wire_arena_, events_};  // what the weight source and gradient sink use
  LossScaler scaler_;
  int64_t applied_steps_ = 0;

  std::unique_ptr<OffloadStore> offload_;  // ZeRO-Infinity's swap files, when some state lives on NVMe

  std::vector<std::string> notes_;
  std::unique_ptr<comm::Communicator> hpz_group_, node_group_, cross_group_;
  std::unique_ptr<TensorGroup> tensor_group_;  // the layers' collectives over tp_comm_; null at t = 1
  std::optional<Pipeline> pipeline_;
  LayerLoop<float> loop_;
  // A pipeline stage's further activation sets (1F1B keeps p - stage micro-batches in flight); loop_ is the
  // first.
  std::vector<std::unique_ptr<LayerLoop<float>>> extra_loops_;
  // A pipeline stage's activation sets by chunk: slots_[c][i] (slots_[0][0] is loop_).
  std::vector<std::vector<LayerLoop<float>*>> slots_;
  // Each activation set's send buffer (send_staging_[c][i] beside slots_[c][i]: a set's message is in
  // flight until the set is used again), and the one buffer every received boundary tensor and the tied
  // embedding's gradient pass through.
  std::vector<std::vector<WireStaging>> send_staging_;
  WireStaging receive_staging_{context_, "pipeline receive staging"};
  // Enough activation sets (and send buffers) in every chunk for the schedule of k micro-batches.
  void ensure_slots(int k);
  std::unique_ptr<EngineWeights<float>> weights_;
  // The order the loop finalizes gradients in; in a pipeline stage, each of its chunks' (the last first).
  std::vector<std::vector<int>> gradient_order_;
  std::unique_ptr<EngineGradients<float>> gradients_;
  // This rank's master, m and v (in memory or on NVMe); it refreshes weights_, so it goes first.
  std::unique_ptr<OptimizerState> optimizer_state_;
};

class ParallelGroups;
// This rank's pipeline stage of `layout` and its channels in `groups`, as the engine takes them (nullopt at
// p = 1).
std::optional<ZeroEngine::Pipeline> pipeline_stage(const PipelineLayout& layout,
                                                   const ParallelGroups& groups);

}  // namespace gpt
