// ZeroEngine: state, the micro-step schedule, the optimizer step; see engine.h.
#include "zero/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <sstream>
#include <stdexcept>

#include "kernels/cpu/cpu_ops.h"
#include "model/init.h"
#include "zero/memory_model.h"
#include "zero/optimizer.h"
#include "zero/parallel_groups.h"
#include "zero/pipeline_schedule.h"
#include "zero/qgz.h"
#include "zero/tensor_group.h"

namespace gpt {

const char* precision_name(DType precision) {
  if (precision == DType::kF16) return "fp16";
  if (precision == DType::kBF16) return "bf16";
  if (precision == DType::kF64) return "fp64";
  return "fp32";
}

const char* offload_device_name(OffloadDevice device) {
  if (device == OffloadDevice::kCpu) return "cpu";
  if (device == OffloadDevice::kNvme) return "nvme";
  return "none";
}

namespace {

TensorSlice slice_of(const comm::Communicator* tensor_parallel) {
  return tensor_parallel ? TensorSlice{tensor_parallel->size(), tensor_parallel->rank()} : TensorSlice{};
}

// The pipeline stage's chunk c (chunk 0 is loop_'s), or the whole model.
std::optional<PipelineChunk> chunk_of(const GPTConfig& model, const ZeroEngine::Pipeline* pipeline,
                                      int chunk = 0) {
  if (!pipeline) return std::nullopt;
  return stage_chunks(model, pipeline->layout, pipeline->stage)[size_t(chunk)];
}

// The parameters this rank holds: its tensor-parallel slice of the model, or of its pipeline stage's part.
ParamTable engine_table(const GPTConfig& model, const ZeroConfig& config, const comm::Communicator* tp,
                        const ZeroEngine::Pipeline* pipeline) {
  return rank_param_table(model, config.tile_factor, slice_of(tp),
                          pipeline ? pipeline->layout : PipelineLayout{}, pipeline ? pipeline->stage : 0);
}

// The order in which a stage's gradients become final, in segments a micro-step hands over whole: the loop's
// order for the whole model; a stage's chunks' orders, the last chunk's first (an interleaved stage runs each
// chunk's backward as its own micro-step).
std::vector<std::vector<int>> gradient_order(const LayerLoop<float>& loop, const GPTConfig& model,
                                             const ZeroConfig& config, const ZeroEngine::Pipeline* pipeline) {
  if (!pipeline) return {loop.schedule().gradients};
  std::vector<std::vector<int>> order;
  const std::vector<PipelineChunk> chunks = stage_chunks(model, pipeline->layout, pipeline->stage);
  for (size_t c = chunks.size(); c-- > 0;) {
    order.push_back(
        loop_schedule(int(loop.table().units.size()), config.tile_factor, config.recompute, chunks[c])
            .gradients);
  }
  return order;
}

}  // namespace

ZeroEngine::ZeroEngine(const GPTConfig& model, const ZeroConfig& config, int micro_batch,
                       comm::Communicator& dp, uint64_t seed, Ops* ops, comm::Communicator* tensor_parallel,
                       const Pipeline* pipeline)
    : model_(model),
      config_(config),
      dp_(dp),
      tp_comm_(tensor_parallel),
      dp_topology_(data_parallel_topology(dp.topology(), slice_of(tensor_parallel).size, dp.rank(),
                                          pipeline ? pipeline->layout.stages : 1)),
      seed_(seed),
      table_(engine_table(model, config, tensor_parallel, pipeline)),
      partition_(table_, dp.size(), config.stage == 0 ? 1 : dp.size()),
      ops_(ops ? *ops : cpu_ops()),
      arena_("device", Arena::kUnlimited, &ops_.device_memory()),
      wire_arena_("wire", Arena::kUnlimited, &ops_.wire_memory()),
      events_(config.record_events),
      scaler_(config.loss_scaler, config.precision == DType::kF16 && config.loss_scaler.loss_scale == 0),
      tensor_group_(tensor_parallel ? std::make_unique<CommTensorGroup>(*tensor_parallel, context_)
                                    : nullptr),
      pipeline_(pipeline ? std::optional<Pipeline>(*pipeline) : std::nullopt),
      loop_(
          model, micro_batch, config.recompute, ops_, arena_, config.tile_factor,
          TensorParallel{tensor_group_.get(), config.sequence_parallel, config.distribute_saved_activations},
          chunk_of(model, pipeline),
          layer_loop_compute(config.precision, ops_.compute_dtype(config.precision))) {
  if (pipeline_) {
    slots_.resize(pipeline_->chunks.size());
    slots_[0].push_back(&loop_);
    // 1F1B's p - stage sets now, so the first step's memory is the stage's; interleaving's at the first step.
    if (slots_.size() == 1) ensure_slots(pipeline_->layout.stages);
  }
  // The settings' own rules (ParallelLayout's in model/params.cc, the rest in zero/config_problems.cc), in
  // the order a user fixes them; the first is thrown.
  const ParallelLayout layout{.tensor_parallel = tensor_parallel_size(),
                              .sequence_parallel = config.sequence_parallel,
                              .tile_factor = config.tile_factor};
  for (const Problems& found : {layout.problems(model), config.problems(dp_topology_),
                                config.offload.problems(config, model, dp.size(), tensor_parallel_size())}) {
    if (!found.empty()) throw std::invalid_argument(found.front());
  }
  for (const UnitInfo& u : table_.units) unit_names_.push_back(u.name);
  if (config.offload.swaps_through_wire()) {
    offload_ = std::make_unique<OffloadStore>(config_, partition_, dp.topology().world_rank, context_);
    notes_.insert(notes_.end(), offload_->notes().begin(), offload_->notes().end());
  }
  create_zeropp_groups();
  const bool hierarchical = gathers_hierarchically(), qgz = reduces_by_qgz();
  weights_ = make_weight_source<float>({config_, partition_, unit_names_, dp_, hpz_group_.get(), context_,
                                        offload_.get(), hierarchical ? node_group_.get() : nullptr,
                                        hierarchical ? cross_group_.get() : nullptr,
                                        loop_.compute_dtype() != loop_dtype(config_.precision)});
  optimizer_state_ = make_optimizer_state({config_, partition_, context_, *weights_, offload_.get()});
  gradient_order_ = gradient_order(loop_, model, config, pipeline);
  gradients_ = make_gradient_sink<float>({config_, partition_, unit_names_, gradient_order_, dp_,
                                          qgz ? node_group_.get() : nullptr,
                                          qgz ? cross_group_.get() : nullptr, context_});
  // A dry run (kernels/dry) only counts memory: there are no values to initialize.
  if (!ops_.computes()) return;
  // Each rank initializes only what it owns: the initializer is a pure function of (seed, flat index).
  write_state([&](int64_t begin, int64_t n, float* master, float*, float*) {
    for_each_owned_range(begin, n, [&](int64_t model_begin, int64_t model_end, int64_t at) {
      init_gpt2_params(model, table_, seed, model_begin, model_end, master + at);
    });
  });
}

Tensor ZeroEngine::state_tensor(float* data) const {
  return Tensor{data, {partition_.shard_total()}, DType::kF32, ops_.device()};
}

ZeroEngine::~ZeroEngine() = default;

comm::Topology ZeroEngine::data_parallel_topology(const comm::Topology& world, int t, int dp_rank, int p) {
  if (std::string problem = tensor_parallel_node_problem(t, world.ranks_per_node, "--ranks-per-node");
      !problem.empty()) {
    throw comm::TopologyError(problem);
  }
  const int stage_ranks = world.world_size / p, per_node = world.ranks_per_node, d = stage_ranks / t;
  if (p > 1 && stage_ranks < per_node) {  // several stages on a node: the group is on one
    if (per_node % stage_ranks != 0) {
      throw comm::TopologyError(
          "a pipeline stage's " + std::to_string(stage_ranks) + " ranks (t x d) do not divide the " +
          std::to_string(per_node) +
          " ranks per node; choose --ranks-per-node as a multiple of t x d, or a divisor");
    }
    return comm::make_topology(d, dp_rank, d, world.simulated);
  }
  if (stage_ranks % per_node != 0) {
    throw comm::TopologyError("a pipeline stage's " + std::to_string(stage_ranks) +
                              " ranks (t x d) are no whole number of nodes of " + std::to_string(per_node) +
                              " ranks; choose --ranks-per-node dividing t x d");
  }
  return comm::make_topology(d, dp_rank, per_node / t, world.simulated);
}

void ZeroEngine::create_zeropp_groups() {
  // Every rank of the data-parallel group creates the same sequence of subgroups, each with its own members'
  // list, named by data-parallel rank and handed to the communicator as world ranks.
  const comm::Topology& t = dp_topology_;
  const int rank = t.world_rank, L = t.ranks_per_node, N = t.num_nodes(), h = config_.hpz_partition_size;
  auto world_ranks = [&](int first, int count, int stride) {
    std::vector<int> members;
    for (int i = 0; i < count; ++i) members.push_back(dp_.world_rank_of(first + i * stride));
    return members;
  };
  if (h > 1) hpz_group_ = dp_.subgroup(world_ranks(rank / h * h, h, 1));
  // qgZ's two hops and the hierarchical weight gather use the same two groups.
  if (reduces_by_qgz() || gathers_hierarchically()) {
    node_group_ = dp_.subgroup(world_ranks(t.node() * L, L, 1));
    cross_group_ = dp_.subgroup(world_ranks(t.local_rank(), N, L));
  }
  if (config_.hierarchical_allgather && !gathers_hierarchically()) {
    notes_.push_back(
        "zero_hierarchical_allgather has no effect here: it needs two or more nodes of two or more "
        "data-parallel ranks at stage 3, and the flat gather is then the same");
  }
  if (config_.quantized_gradients && N < 2) {
    notes_.push_back("qgZ: all ranks are on one node, so gradients use the plain ring reduce-scatter" +
                     std::string(config_.loco ? " (and zeropp_loco_param has nothing to compensate)" : ""));
  }
}

double ZeroEngine::forward(const MicroBatch& mb, bool training, comm::Phase phase, LayerLoop<float>* loop) {
  weights_->set_forward_phase(phase);
  return (loop ? *loop : loop_)
      .forward(*weights_, mb.inputs, mb.targets, dropout_for(mb, training), training);
}

void ZeroEngine::ensure_slots(int k) {
  const int p = pipeline_->layout.stages, v = int(slots_.size());
  const std::vector<PipelineOp> schedule = pipeline_schedule(p, pipeline_->stage, v, k);
  for (int c = 0; c < v; ++c) {
    while (int(slots_[size_t(c)].size()) < max_in_flight(schedule, c)) {
      extra_loops_.push_back(std::make_unique<LayerLoop<float>>(
          model_, loop_.micro_batch(), config_.recompute, ops_, arena_, config_.tile_factor,
          TensorParallel{tensor_group_.get(), config_.sequence_parallel,
                         config_.distribute_saved_activations},
          chunk_of(model_, &*pipeline_, c), loop_.compute_dtype()));
      slots_[size_t(c)].push_back(extra_loops_.back().get());
    }
  }
  send_staging_.resize(slots_.size());
  for (size_t c = 0; c < slots_.size(); ++c) {
    while (send_staging_[c].size() < slots_[c].size())
      send_staging_[c].emplace_back(context_, "pipeline send staging");
  }
}

double ZeroEngine::run_pipeline(const std::vector<MicroBatch>& micro_batches, double loss_scale,
                                StepResult& result) {
  using Clock = std::chrono::steady_clock;
  const int k = int(micro_batches.size()), p = pipeline_->layout.stages, v = int(slots_.size());
  ensure_slots(k);
  // A set's last message must have left before the set's buffers are written again.
  std::vector<std::vector<comm::Request>> sending(slots_.size());
  for (size_t c = 0; c < slots_.size(); ++c) sending[c].resize(slots_[c].size());
  double loss_sum = 0;
  const auto begin = Clock::now();
  for (const PipelineOp& op : pipeline_schedule(p, pipeline_->stage, v, k)) {
    const Pipeline::Links& links = pipeline_->chunks[size_t(op.chunk)];
    const size_t slot = size_t(op.micro_batch) % slots_[size_t(op.chunk)].size();
    LayerLoop<float>& loop = *slots_[size_t(op.chunk)][slot];
    comm::Request& sent = sending[size_t(op.chunk)][slot];
    sent.wait();
    // Each op's time counts from its input's arrival: waiting for a neighbour is the bubble, not compute.
    const bool forward_op = op.kind == PipelineOp::kForward;
    if (comm::Communicator* in = forward_op ? links.forward_in : links.backward_in)
      receive_boundary(*in, forward_op ? loop.chunk_input() : loop.boundary_gradient());
    const auto start = Clock::now();
    if (forward_op) {
      loss_sum += forward(micro_batches[size_t(op.micro_batch)], true, comm::Phase::kParamGatherFwd, &loop);
    } else {
      loop.backward(*weights_, *gradients_, float(loss_scale / k));
      gradients_->end_micro_step();
    }
    (forward_op ? result.forward_ms : result.backward_ms) +=
        std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    if (comm::Communicator* out = forward_op ? links.forward_out : links.backward_out)
      sent = send_boundary(*out, forward_op ? loop.chunk_output() : loop.boundary_gradient(),
                           send_staging_[size_t(op.chunk)][slot]);
  }
  for (auto& chunk : sending) {
    for (comm::Request& r : chunk) r.wait();
  }
  // Every stage's compute and pipeline time, for the bubble (StepResult).
  const double mine[2] = {result.forward_ms + result.backward_ms,
                          std::chrono::duration<double, std::milli>(Clock::now() - begin).count()};
  std::vector<double> all(size_t(2 * p));
  pipeline_->group->all_gather(mine, all.data(), sizeof mine, comm::Phase::kOther).wait();
  for (int s = 0; s < p; ++s) {
    result.stage_busy_ms.push_back(all[size_t(2 * s)]);
    result.stage_pipeline_ms.push_back(all[size_t(2 * s + 1)]);
  }
  return loss_sum;
}

bool ZeroEngine::scatter_gathers() const {
  return pipeline_ && tensor_parallel_size() > 1 && !config_.sequence_parallel;
}

Tensor ZeroEngine::boundary_part(const Tensor& whole) const {
  if (!scatter_gathers()) return whole;
  const int64_t n = whole.numel() / tensor_parallel_size();  // C, and so B T C, divides by t
  const size_t bytes = whole.nbytes() / size_t(whole.numel()) * size_t(n);
  return Tensor{static_cast<char*>(whole.data) + size_t(tensor_parallel_rank()) * bytes,
                {n},
                whole.dtype,
                whole.device};
}

// A point-to-point message over a two-rank channel is a broadcast rooted at the sender. The boundary
// tensors live in device memory, so each message is staged through wire memory. On a GPU the sender's kernels
// must have written the staged copy, and the receiver's must be done with the buffer's last use, before the
// communicator touches it (before_communication).
comm::Request ZeroEngine::send_boundary(comm::Communicator& channel, const Tensor& whole, WireStaging& wire) {
  const Tensor part = boundary_part(whole);
  const Tensor staged = wire.view(part.numel(), part.dtype);
  ops_.copy(staged, part);
  context_.before_communication(channel);
  return channel.broadcast(staged.data, staged.nbytes(), channel.rank(), comm::Phase::kPpP2p);
}

void ZeroEngine::receive_boundary(comm::Communicator& channel, const Tensor& whole) {
  const Tensor staged = receive_staging_.view(whole.numel(), whole.dtype);
  const Tensor part = boundary_part(staged);
  context_.before_communication(channel);
  channel.broadcast(part.data, part.nbytes(), 1 - channel.rank(), comm::Phase::kPpP2p).wait();
  if (scatter_gathers()) {
    context_.before_communication(*tp_comm_);  // in place: this rank's part already sits at its offset
    tp_comm_->all_gather(part.data, staged.data, part.nbytes(), comm::Phase::kPpP2p).wait();
  }
  ops_.copy(whole, staged);
}

void ZeroEngine::sum_tied_embedding() {
  if (!pipeline_ || !pipeline_->embedding) return;
  const UnitPartition& wte = partition_.unit(ParamTable::kWte);
  const comm::OperationLabel serving("the tied wte's gradient between the first and the last stage");
  const Tensor gradient = context_.view(gradients_->shard() + wte.shard_offset, wte.shard, DType::kF32);
  const Tensor staged = receive_staging_.view(gradient.numel(), gradient.dtype);
  ops_.copy(staged, gradient);
  context_.before_communication(*pipeline_->embedding);
  pipeline_->embedding
      ->all_reduce(staged.data, DType::kF32, size_t(wte.shard), 1.0f, comm::Phase::kGradReduce)
      .wait();
  ops_.copy(gradient, staged);
}

double ZeroEngine::tied_copy_sum_of_squares() {
  if (!pipeline_ || !pipeline_->embedding || pipeline_->stage == 0) return 0.0;
  if (partition_.num_shards() == 1 && dp_.rank() != 0) return 0.0;
  const UnitPartition& wte = partition_.unit(ParamTable::kWte);
  return ops_.sum_of_squares(context_.view(gradients_->shard() + wte.shard_offset, wte.shard, DType::kF32));
}

Dropout ZeroEngine::dropout_for(const MicroBatch& mb, bool training) const {
  if (!training) return Dropout{};
  return Dropout{config_.hidden_dropout, config_.attention_dropout, seed_, mb.windows};
}

bool ZeroEngine::local_overflow() {
  return !ops_.all_finite(state_tensor(gradients_->shard()));
}

double ZeroEngine::local_sum_of_squares() {
  // One shard (stage 0): the gradients are identical on every rank, so only rank 0 counts them.
  if (partition_.num_shards() == 1 && dp_.rank() != 0) return 0.0;
  const Tensor shard = state_tensor(gradients_->shard());
  if (tensor_parallel_rank() == 0) return ops_.sum_of_squares(shard);
  // The replicated parameters' gradients are the same on every tensor-parallel rank: rank 0 counts them.
  double sum = 0;
  for_each_owned_range(0, partition_.shard_total(), [&](int64_t model_begin, int64_t model_end, int64_t at) {
    for (const ParamInfo& p : table_.params) {
      const int64_t lo = std::max(model_begin, p.offset), hi = std::min(model_end, p.offset + p.numel);
      if (p.split == TensorSplit::kReplicated || lo >= hi) continue;
      sum += ops_.sum_of_squares(
          context_.view(gradients_->shard() + at + (lo - model_begin), hi - lo, DType::kF32));
    }
  });
  return sum;
}

void ZeroEngine::update_weights(double lr, float grad_scale, bool gather_ahead) {
  AdamWHyper hyper = config_.adam;
  hyper.lr = lr;
  const OptimizerState::Visit step = [&](const SubGroup& g, float* master, float* m, float* v,
                                         const Tensor& compute) {
    auto view = [&](float* data) { return context_.view(data, g.size(), DType::kF32); };
    const AdamWState state{view(master), view(gradients_->shard() + g.begin), view(m), view(v), compute};
    for_each_owned_range(g.begin, g.size(), [&](int64_t model_begin, int64_t model_end, int64_t at) {
      adamw_step_range(ops_, table_, model_begin, model_end, state, at, hyper, applied_steps_, grad_scale);
    });
  };
  if (!gather_ahead) return optimizer_state_->update(step);
  const std::vector<int>& forward = loop_.schedule().forward;
  const UnitPartition& first = partition_.unit(forward.front());
  const OptimizerState::UpdateFirst update_first{first.shard_offset, first.shard_offset + first.shard,
                                                 [&] { weights_->begin_forward_ahead(forward); }};
  optimizer_state_->update(step, &update_first);
}

ZeroEngine::StepResult ZeroEngine::train_step(const std::vector<MicroBatch>& micro_batches, double lr,
                                              bool stop_request, NextCall next) {
  using Clock = std::chrono::steady_clock;
  auto since = [](Clock::time_point t) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
  };
  const int k = int(micro_batches.size());
  gradients_->begin_step();
  StepResult result;
  result.loss_scale = scaler_.scale();
  double loss_sum = 0;
  if (pipeline_) {
    loss_sum = run_pipeline(micro_batches, result.loss_scale, result);
  } else {
    for (const MicroBatch& mb : micro_batches) {
      auto start = Clock::now();
      loss_sum += forward(mb, true, comm::Phase::kParamGatherFwd);
      result.forward_ms += since(start);
      start = Clock::now();
      loop_.backward(*weights_, *gradients_, float(result.loss_scale / k));
      gradients_->end_micro_step();
      result.backward_ms += since(start);
    }
  }
  const auto optimizer_start = Clock::now();
  gradients_->end_step();
  sum_tied_embedding();

  // One small fp32 all-reduce per step: the loss sum, the squared gradient norm and the overflow flag. A
  // tensor-parallel group computes one loss: its rank 0 counts it.
  const bool local_nonfinite = !gradients_->take_local_finite();
  float totals[4] = {tensor_parallel_rank() == 0 ? float(loss_sum) : 0.0f,
                     float(local_sum_of_squares() - tied_copy_sum_of_squares()),
                     local_overflow() || local_nonfinite ? 1.0f : 0.0f, stop_request ? 1.0f : 0.0f};
  const comm::OperationLabel serving("the step's agreement on loss, norm and overflow");
  sum_over_world(totals, 4, 1.0f, comm::Phase::kOther);
  result.stop = totals[3] > 0;
  result.loss = totals[0] / (double(k) * dp_.size());
  result.skipped = totals[2] > 0 || !std::isfinite(totals[1]);
  scaler_.update(result.skipped);
  // LoCo's kept errors belong to the gradients of a scale: a skipped step or a new scale makes them stale.
  if (result.skipped || scaler_.scale() != result.loss_scale) reset_feedback();
  if (result.skipped) {
    result.grad_norm = std::numeric_limits<double>::infinity();
    result.optimizer_ms = since(optimizer_start);
    return result;
  }
  result.grad_norm = std::sqrt(double(totals[1])) / result.loss_scale;
  double clip = 1.0;
  if (config_.gradient_clipping > 0 && result.grad_norm > config_.gradient_clipping) {
    clip = config_.gradient_clipping / (result.grad_norm + 1e-6);
  }
  ++applied_steps_;
  if (config_.loco && applied_steps_ % config_.loco_reset_T == 0) reset_feedback();
  const bool gather_ahead = next == NextCall::kTrainStep && !result.stop && gathers_ahead();
  update_weights(lr, float(clip / result.loss_scale), gather_ahead);
  // The gather begun ahead crossed during the rest of the update; it ends in this step, so each step's
  // bytes are counted in a fixed step (the first step's include the second's first gather).
  if (gather_ahead) weights_->finish_forward_ahead();
  result.optimizer_ms = since(optimizer_start);
  return result;
}

std::vector<uint8_t> ZeroEngine::feedback_state() const {
  const LocoFeedback* feedback = gradients_->error_feedback();
  return feedback ? feedback->download() : std::vector<uint8_t>{};
}

size_t ZeroEngine::feedback_bytes() const {
  const LocoFeedback* feedback = gradients_->error_feedback();
  return feedback ? feedback->bytes() : 0;
}

std::string ZeroEngine::feedback_layout() const {
  const LocoFeedback* feedback = gradients_->error_feedback();
  return feedback ? feedback->layout() : "";
}

void ZeroEngine::restore_feedback(const std::vector<uint8_t>& bytes) {
  if (LocoFeedback* feedback = gradients_->error_feedback()) return feedback->upload(bytes);
  if (!bytes.empty()) {
    throw std::invalid_argument(std::to_string(bytes.size()) +
                                " bytes of LoCo kept errors for a run without qgZ error feedback");
  }
}

void ZeroEngine::reset_feedback() {
  if (LocoFeedback* feedback = gradients_->error_feedback()) feedback->reset();
}

void ZeroEngine::sum_over_world(float* values, int n, float scale, comm::Phase phase) {
  // One data-parallel rank and scale 1: the sum is the values themselves.
  if (dp_.size() > 1 || scale != 1.0f) dp_.all_reduce(values, DType::kF32, size_t(n), scale, phase).wait();
  if (tp_comm_) tp_comm_->all_reduce(values, DType::kF32, size_t(n), 1.0f, phase).wait();
  if (pipeline_) pipeline_->group->all_reduce(values, DType::kF32, size_t(n), 1.0f, phase).wait();
}

double ZeroEngine::evaluate(const MicroBatch& micro_batch) {
  float loss = 0;
  if (!pipeline_) {
    loss = float(forward(micro_batch, false, comm::Phase::kEval));
  } else {  // the micro-batch down the chunks in model order; the last one's loss reaches every stage
    ensure_slots(pipeline_->layout.stages);  // an interleaved stage's later chunks before its first step
    for (size_t c = 0; c < slots_.size(); ++c) {
      const Pipeline::Links& links = pipeline_->chunks[c];
      LayerLoop<float>& loop = *slots_[c][0];
      if (links.forward_in) receive_boundary(*links.forward_in, loop.chunk_input());
      loss += float(forward(micro_batch, false, comm::Phase::kEval, &loop));
      if (links.forward_out)
        send_boundary(*links.forward_out, loop.chunk_output(), send_staging_[c][0]).wait();
    }
    pipeline_->group->all_reduce(&loss, DType::kF32, 1, 1.0f, comm::Phase::kEval).wait();
  }
  // One data-parallel rank: the mean is the loss itself.
  if (dp_.size() > 1)
    dp_.all_reduce(&loss, DType::kF32, 1, 1.0f / float(dp_.size()), comm::Phase::kEval).wait();
  return loss;
}

void ZeroEngine::set_training_state(int64_t applied_steps, const LossScaler::State& scaler) {
  applied_steps_ = applied_steps;
  scaler_.restore(scaler);
}

void ZeroEngine::for_each_owned_range(int64_t begin, int64_t n,
                                      const std::function<void(int64_t, int64_t, int64_t)>& copy) const {
  for (int u = 0; u < int(partition_.units().size()); ++u) {
    const UnitPartition& unit = partition_.unit(u);
    const Partition::Range r = partition_.owned_model_range(u, shard_index());
    // The unit's real elements sit at flat shard elements [shard_offset, shard_offset + (r.end - r.begin)).
    const int64_t lo = std::max(begin, unit.shard_offset);
    const int64_t hi = std::min(begin + n, unit.shard_offset + (r.end - r.begin));
    if (lo < hi) copy(r.begin + (lo - unit.shard_offset), r.begin + (hi - unit.shard_offset), lo - begin);
  }
}

void ZeroEngine::read_state(const StateChunk& read) {
  optimizer_state_->stream(false, read);
}

void ZeroEngine::write_state(const StateChunk& fill) {
  optimizer_state_->stream(true, fill);
  optimizer_state_->refresh_weights();
}

void ZeroEngine::load_model_weights(const float* whole_model) {
  const std::vector<float> mine = part_of_whole_model(table_, make_param_table(model_), whole_model);
  const float* model_layout = mine.data();
  write_state([&](int64_t begin, int64_t n, float* master, float*, float*) {  // Adam's moments stay zero
    for_each_owned_range(begin, n, [&](int64_t model_begin, int64_t model_end, int64_t at) {
      std::copy(model_layout + model_begin, model_layout + model_end, master + at);
    });
  });
  applied_steps_ = 0;
}

size_t ZeroEngine::hpz_secondary_peak_bytes() const {
  return weights_->secondary_peak_bytes();
}

std::vector<float> ZeroEngine::gather_master() {
  const int64_t S = partition_.shard_total();
  std::vector<float> padded(partition_.padded_total()), master(S);
  read_state([&](int64_t begin, int64_t n, float* chunk, float*, float*) {
    std::copy(chunk, chunk + n, master.data() + begin);
  });
  if (partition_.num_shards() == 1) {
    padded = master;
  } else {
    std::vector<float> all(size_t(S) * dp_.size());
    dp_.all_gather(master.data(), all.data(), S * sizeof(float), comm::Phase::kOther).wait();
    for (const UnitPartition& u : partition_.units()) {
      for (int p = 0; p < dp_.size(); ++p) {
        std::copy_n(all.data() + size_t(p) * S + u.shard_offset, u.shard,
                    padded.data() + u.padded_offset + int64_t(p) * u.shard);
      }
    }
  }
  std::vector<float> model(table_.total);
  for (const UnitPartition& u : partition_.units()) {
    std::copy_n(padded.data() + u.padded_offset, u.numel, model.data() + u.model_offset);
  }
  return model;
}

std::vector<ZeroEngine::MemoryLine> ZeroEngine::memory() const {
  auto usage = [&](const std::string& category) -> size_t {
    size_t bytes = 0;
    for (const Arena* arena : {&arena_, &wire_arena_}) {
      for (const auto& c : arena->usage_by_category()) {
        if (c.category == category) bytes += c.peak_bytes;
      }
    }
    return bytes;
  };
  // Each model state's arena category is named as its formula's state.
  std::vector<MemoryLine> lines;
  for (const StateFormula& f : zero_state_formulas(partition_, config_, dp_.topology().num_nodes()))
    lines.push_back({f.state, usage(f.state), f.formula, f.bytes, f.tier});
  lines.push_back({"buffers", usage("buffers"), "", 0});
  lines.push_back({"activations", activation_bytes(), "", 0});
  return lines;
}

std::string ZeroEngine::memory_table() const {
  std::ostringstream out;
  out << "memory per rank (ZeRO stage " << config_.stage << ", " << precision_name(config_.precision)
      << ", W = " << dp_.size() << ", P = " << partition_.padded_total() << " padded parameters)\n";
  size_t total = 0;
  for (const MemoryLine& line : memory()) {
    total += line.bytes;
    char row[160];
    std::snprintf(row, sizeof row, "  %-16s %12s", line.state.c_str(), format_bytes(line.bytes).c_str());
    out << row;
    if (!line.formula.empty())
      out << "   ZeRO formula " << line.formula << " = " << format_bytes(size_t(line.formula_bytes));
    if (line.tier == "nvme") out << " in the swap files (NVMe)";
    out << "\n";
  }
  out << "  total            " << format_bytes(total) << "\n";
  return out.str();
}

std::optional<ZeroEngine::Pipeline> pipeline_stage(const PipelineLayout& layout,
                                                   const ParallelGroups& groups) {
  if (groups.pipeline_size() == 1) return std::nullopt;
  ZeroEngine::Pipeline stage{layout, groups.pipeline_stage(), groups.pipeline(), {}, groups.embedding()};
  for (int c = 0; c < groups.chunks(); ++c) {
    stage.chunks.push_back(
        {groups.forward_in(c), groups.forward_out(c), groups.backward_in(c), groups.backward_out(c)});
  }
  return stage;
}

}  // namespace gpt
