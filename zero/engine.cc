// ZeroEngine: state, the micro-step schedule, the optimizer step; see engine.h.
#include "zero/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include "model/init.h"
#include "zero/gather.h"
#include "zero/optimizer.h"
#include "zero/reduce.h"
#include "zero/wire.h"

namespace gpt {
namespace {}  // namespace

const char* precision_name(Precision precision) {
  switch (precision) {
    case Precision::kFp16:
      return "fp16";
    case Precision::kBf16:
      return "bf16";
    case Precision::kFp32:
      break;
  }
  return "fp32";
}

ZeroEngine::ZeroEngine(const GPTConfig& model, const ZeroConfig& config, int micro_batch,
                       comm::Communicator& dp, uint64_t seed)
    : model_(model),
      config_(config),
      B_(micro_batch),
      T_(model.seq_len),
      dp_(dp),
      seed_(seed),
      table_(make_param_table(model)),
      partition_(table_, dp.size(), config.stage == 0 ? 1 : dp.size()),
      events_(config.record_events),
      scaler_(config.loss_scaler,
              config.precision == Precision::kFp16 && config.loss_scaler.loss_scale == 0) {
  if (config.stage < 0 || config.stage > 3) throw std::invalid_argument("ZeRO stage must be 0, 1, 2 or 3");
  if (std::string problem = check_zeropp(config, dp.topology()); !problem.empty()) {
    throw std::invalid_argument(problem);
  }
  const int L = model.num_layers, U = int(table_.units.size());
  for (const UnitInfo& u : table_.units) unit_names_.push_back(u.name);
  // Forward: wte, wpe, blocks, ln_f. Backward gathers what backward computes with: ln_f and wte for the head,
  // then the blocks from the last; gradients complete in the reverse of the forward order.
  for (int u = 0; u < U; ++u) forward_schedule_.push_back(u);
  backward_schedule_ = {table_.final_norm_unit(), ParamTable::kWte};
  for (int l = L - 1; l >= 0; --l) backward_schedule_.push_back(ParamTable::block_unit(l));
  for (int u = U - 1; u >= 0; --u) backward_order_.push_back(u);

  const int shard_index = partition_.num_shards() == 1 ? 0 : dp.rank();
  const int64_t S = partition_.shard_total(), P = partition_.padded_total();
  const size_t cb = wire_bytes(config.precision);
  master_ = static_cast<float*>(arena_.allocate("fp32 master weights", "master", S * sizeof(float)));
  adam_m_ = static_cast<float*>(arena_.allocate("Adam first moment", "moments", S * sizeof(float)));
  adam_v_ = static_cast<float*>(arena_.allocate("Adam second moment", "moments", S * sizeof(float)));
  const bool sharded_weights = config.stage == 3, sharded_grads = config.stage >= 2;
  compute_ = arena_.allocate("compute weights", "compute weights", (sharded_weights ? S : P) * cb);
  if (!sharded_weights && config.precision != Precision::kFp32) {
    compute_fp32_ =
        static_cast<float*>(arena_.allocate("compute weights widened to fp32", "buffers", P * sizeof(float)));
  }
  grad_ = static_cast<float*>(
      arena_.allocate("fp32 gradients", "gradients", (sharded_grads ? S : P) * sizeof(float)));
  if (sharded_grads) {
    int64_t largest = 0;
    for (int u = 0; u < U; ++u) {
      if (u != ParamTable::kWte) largest = std::max(largest, partition_.unit(u).numel);
    }
    unit_grad_ = static_cast<float*>(arena_.allocate("unit gradient", "buffers", largest * sizeof(float)));
    wte_grad_ = static_cast<float*>(
        arena_.allocate("wte gradient", "buffers", partition_.unit(ParamTable::kWte).numel * sizeof(float)));
    reducer_ = std::make_unique<GradientReducer>(partition_, unit_names_, backward_order_, dp_,
                                                 config.precision, config.reduce_bucket_size,
                                                 config.overlap_comm, grad_, arena_, events_);
  }
  if (sharded_weights) {
    create_zeropp_groups();
    gatherer_ = std::make_unique<WeightGatherer>(partition_, unit_names_, dp_, hpz_group_.get(), config_,
                                                 arena_, events_);
    if (node_group_)
      reducer_->use_quantized_gradients(node_group_.get(), cross_group_.get(), config.gradient_block);
  }

  // Each rank initializes only what it owns: the initializer is a pure function of (seed, flat index).
  for (int u = 0; u < U; ++u) {
    const Partition::Range r = partition_.owned_model_range(u, shard_index);
    init_gpt2_params(model, table_, seed, r.begin, r.end, master_ + partition_.unit(u).shard_offset);
  }
  refresh_compute_weights();

  const size_t BTC = size_t(B_) * T_ * model.hidden;
  residual_.assign((L + 1) * BTC, 0.0f);
  blocks_.resize(config.checkpoint_activations ? 1 : L);
  for (auto& block : blocks_) block.resize(model, B_, T_);
  scratch_.resize(model, B_, T_);
  head_.resize(model, B_, T_);
  dresidual_.assign(BTC, 0.0f);
  if (config.checkpoint_activations) recompute_out_.assign(BTC, 0.0f);
}

ZeroEngine::~ZeroEngine() = default;

std::string ZeroEngine::check_zeropp(const ZeroConfig& config, const comm::Topology& topology) {
  const bool any = config.quantized_weights || config.quantized_gradients || config.hpz_partition_size > 1;
  if (any && config.stage != 3) {
    return "ZeRO++ (zero_quantized_weights, zero_hpz_partition_size, zero_quantized_gradients) needs ZeRO "
           "stage 3, "
           "but the stage is " +
           std::to_string(config.stage) + "; set zero_optimization.stage to 3";
  }
  const int h = config.hpz_partition_size, L = topology.ranks_per_node;
  if (h < 1 || L % h != 0) {
    return "zero_hpz_partition_size " + std::to_string(h) + " does not divide the " + std::to_string(L) +
           " ranks per node; choose a divisor of the ranks per node (1 turns hpZ off)";
  }
  for (auto [key, block] : {std::pair{"zeropp_weight_block_size", config.weight_block},
                            std::pair{"zeropp_gradient_block_size", config.gradient_block}}) {
    if (block <= 0 || block % 8 != 0) {
      return std::string(key) + " is " + std::to_string(block) +
             "; a quantization block must be a positive multiple of 8 (defaults 2048 and 512)";
    }
  }
  return "";
}

void ZeroEngine::create_zeropp_groups() {
  // Every rank creates the same sequence of subgroups, each with its own members' list.
  const comm::Topology& t = dp_.topology();
  const int rank = t.world_rank, L = t.ranks_per_node, N = t.num_nodes(), h = config_.hpz_partition_size;
  if (h > 1) {
    std::vector<int> members;
    for (int i = rank / h * h; i < rank / h * h + h; ++i) members.push_back(i);
    hpz_group_ = dp_.subgroup(members);
  }
  if (config_.quantized_gradients && N >= 2) {
    std::vector<int> node, cross;
    for (int i = t.node() * L; i < t.node() * L + L; ++i) node.push_back(i);
    for (int n = 0; n < N; ++n) cross.push_back(n * L + t.local_rank());
    node_group_ = dp_.subgroup(node);
    cross_group_ = dp_.subgroup(cross);
  } else if (config_.quantized_gradients) {
    notes_.push_back("qgZ: all ranks are on one node, so gradients use the plain ring reduce-scatter");
  }
}

void ZeroEngine::refresh_compute_weights() {
  const int64_t S = partition_.shard_total();
  const size_t cb = wire_bytes(config_.precision);
  if (config_.stage == 3) {
    to_wire(config_.precision, master_, compute_, S);
    return;
  }
  if (config_.stage == 0) {
    to_wire(config_.precision, master_, compute_, S);  // the whole padded vector
  } else {
    // Stages 1 and 2: round this rank's updated shard, then all-gather every rank's, unit by unit, into the
    // full compute weights (padded layout).
    std::vector<uint8_t> shard(S * cb);
    to_wire(config_.precision, master_, shard.data(), S);
    for (const UnitPartition& u : partition_.units()) {
      dp_.all_gather(shard.data() + u.shard_offset * cb,
                     static_cast<uint8_t*>(compute_) + u.padded_offset * cb, u.shard * cb,
                     comm::Phase::kParamGatherFwd)
          .wait();
    }
  }
  if (compute_fp32_) from_wire(config_.precision, compute_, compute_fp32_, partition_.padded_total());
}

const float* ZeroEngine::acquire(int unit) {
  if (gatherer_) return gatherer_->acquire(unit);
  const int64_t offset = partition_.unit(unit).padded_offset;
  return compute_fp32_ ? compute_fp32_ + offset : static_cast<const float*>(compute_) + offset;
}

void ZeroEngine::release(int unit) {
  if (gatherer_) gatherer_->release(unit);
}

float* ZeroEngine::unit_gradient(int unit) {
  if (!reducer_) return grad_ + partition_.unit(unit).padded_offset;  // stages 0, 1: accumulate in place
  float* buffer = unit == ParamTable::kWte ? wte_grad_ : unit_grad_;
  std::fill(buffer, buffer + partition_.unit(unit).numel, 0.0f);
  return buffer;
}

void ZeroEngine::gradient_ready(int unit) {
  float* grad = !reducer_ ? grad_ + partition_.unit(unit).padded_offset
                          : (unit == ParamTable::kWte ? wte_grad_ : unit_grad_);
  if (gradient_hook_) gradient_hook_(unit, grad, partition_.unit(unit).numel);
  if (reducer_) reducer_->add(unit, grad);
}

double ZeroEngine::forward(const MicroBatch& mb, bool training, comm::Phase phase) {
  const int L = model_.num_layers, C = model_.hidden;
  const size_t BTC = size_t(B_) * T_ * C;
  if (gatherer_) gatherer_->begin_pass(forward_schedule_, phase, compute_);
  const float* wte = acquire(ParamTable::kWte);
  const float* wpe = acquire(ParamTable::kWpe);
  events_.add(EngineEvent::Kind::kComputeBegin, "wte+wpe", false);
  const Dropout dropout = dropout_for(mb, training);
  embed_forward(model_, wte, wpe, mb.inputs, B_, T_, residual_.data(), dropout);
  release(ParamTable::kWpe);
  for (int l = 0; l < L; ++l) {
    const int unit = ParamTable::block_unit(l);
    const float* weights = acquire(unit);
    events_.add(EngineEvent::Kind::kComputeBegin, unit_names_[unit], false);
    BlockActivations<float>& acts = blocks_[config_.checkpoint_activations || !training ? 0 : l];
    block_forward(model_, weights, residual_.data() + l * BTC, residual_.data() + (l + 1) * BTC, acts, B_, T_,
                  dropout, l);
    release(unit);
  }
  const int lnf_unit = table_.final_norm_unit();
  const float* lnf = acquire(lnf_unit);
  events_.add(EngineEvent::Kind::kComputeBegin, unit_names_[lnf_unit], false);
  const float loss =
      head_forward(model_, lnf, lnf + C, wte, residual_.data() + L * BTC, mb.targets, head_, B_, T_);
  release(lnf_unit);
  release(ParamTable::kWte);
  return loss;
}

Dropout ZeroEngine::dropout_for(const MicroBatch& mb, bool training) const {
  if (!training) return Dropout{};
  return Dropout{config_.hidden_dropout, config_.attention_dropout, seed_, mb.windows};
}

void ZeroEngine::backward(const MicroBatch& mb, float loss_multiplier) {
  const int L = model_.num_layers, C = model_.hidden;
  const Dropout dropout = dropout_for(mb, true);
  const size_t BTC = size_t(B_) * T_ * C;
  if (gatherer_) gatherer_->begin_pass(backward_schedule_, comm::Phase::kParamGatherBwd, compute_);
  const int lnf_unit = table_.final_norm_unit();
  const float* lnf = acquire(lnf_unit);
  const float* wte = acquire(ParamTable::kWte);
  events_.add(EngineEvent::Kind::kComputeBegin, unit_names_[lnf_unit], true);
  float* dlnf = unit_gradient(lnf_unit);
  float* dwte = unit_gradient(ParamTable::kWte);
  head_backward(model_, lnf, wte, dlnf, dlnf + C, dwte, residual_.data() + L * BTC, mb.targets, head_,
                loss_multiplier / float(B_ * T_), dresidual_.data(), B_, T_);
  release(lnf_unit);
  release(ParamTable::kWte);
  gradient_ready(lnf_unit);
  for (int l = L - 1; l >= 0; --l) {
    const int unit = ParamTable::block_unit(l);
    const float* weights = acquire(unit);
    const float* x_in = residual_.data() + l * BTC;
    BlockActivations<float>& acts = blocks_[config_.checkpoint_activations ? 0 : l];
    if (config_.checkpoint_activations) {
      // Recompute this block's forward from its saved input, with the weights of this same gather.
      block_forward(model_, weights, x_in, recompute_out_.data(), acts, B_, T_, dropout, l);
    }
    events_.add(EngineEvent::Kind::kComputeBegin, unit_names_[unit], true);
    block_backward(model_, weights, unit_gradient(unit), x_in, acts, scratch_, dresidual_.data(), B_, T_,
                   dropout, l);
    release(unit);
    gradient_ready(unit);
  }
  // The embedding's backward needs no weights: it scatters into wte's open gradient and into wpe's.
  embed_backward(model_, dwte, unit_gradient(ParamTable::kWpe), mb.inputs, dresidual_.data(), B_, T_,
                 dropout);
  gradient_ready(ParamTable::kWpe);
  gradient_ready(ParamTable::kWte);
}

void ZeroEngine::reduce_at_boundary() {
  const int64_t P = partition_.padded_total();
  const DType wire = wire_dtype(config_.precision);
  const size_t wb = dtype_size(wire);
  std::vector<uint8_t> wire_grads(P * wb);
  to_wire(config_.precision, grad_, wire_grads.data(), P, 1.0f / float(dp_.size()));  // pre-divided: the mean
  if (config_.stage == 0) {
    dp_.all_reduce(wire_grads.data(), wire, P, 1.0f, comm::Phase::kGradReduce).wait();
    from_wire(config_.precision, wire_grads.data(), grad_, P);
    return;
  }
  // Stage 1: one reduce-scatter of the whole padded vector, rank-major by unit like the stage-2/3 buckets.
  const int W = dp_.size();
  const int64_t S = partition_.shard_total();
  std::vector<uint8_t> send(P * wb);
  for (const UnitPartition& u : partition_.units()) {
    for (int p = 0; p < W; ++p) {
      std::memcpy(send.data() + (size_t(p) * S + u.shard_offset) * wb,
                  wire_grads.data() + (u.padded_offset + int64_t(p) * u.shard) * wb, u.shard * wb);
    }
  }
  std::vector<float> shard(S);
  dp_.reduce_scatter(send.data(), wire, shard.data(), S, 1.0f, comm::Phase::kGradReduce).wait();
  // Keep the reduced shard at the front of grad_ (the rank's shard layout), which the optimizer reads.
  std::copy(shard.begin(), shard.end(), grad_);
}

bool ZeroEngine::local_overflow() const {
  const int64_t n = config_.stage == 0 ? partition_.padded_total() : partition_.shard_total();
  bool bad = false;
#pragma omp parallel for reduction(|| : bad) schedule(static)
  for (int64_t i = 0; i < n; ++i) bad = bad || !std::isfinite(grad_[i]);
  return bad;
}

double ZeroEngine::local_sum_of_squares() const {
  if (partition_.num_shards() == 1 && dp_.rank() != 0) return 0.0;  // stage 0: identical on every rank
  return sum_of_squares(grad_, partition_.shard_total());
}

ZeroEngine::StepResult ZeroEngine::train_step(const std::vector<MicroBatch>& micro_batches, double lr,
                                              bool stop_request) {
  using Clock = std::chrono::steady_clock;
  auto since = [](Clock::time_point t) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
  };
  const int k = int(micro_batches.size());
  const int64_t grad_elements = config_.stage >= 2 ? partition_.shard_total() : partition_.padded_total();
  std::fill(grad_, grad_ + grad_elements, 0.0f);
  StepResult result;
  result.loss_scale = scaler_.scale();
  const float multiplier = float(result.loss_scale / k);
  double loss_sum = 0;
  for (const MicroBatch& mb : micro_batches) {
    auto start = Clock::now();
    loss_sum += forward(mb, true, comm::Phase::kParamGatherFwd);
    result.forward_ms += since(start);
    start = Clock::now();
    backward(mb, multiplier);
    if (reducer_) reducer_->finish();
    result.backward_ms += since(start);
  }
  const auto optimizer_start = Clock::now();
  if (!reducer_) reduce_at_boundary();

  // One small fp32 all-reduce per step: the loss sum, the squared gradient norm and the overflow flag.
  // qgZ never puts a gradient on the wire unquantized, so each rank also reports its local non-finite values.
  const bool local_nonfinite = reducer_ && !reducer_->take_local_finite();
  float totals[4] = {float(loss_sum), float(local_sum_of_squares()),
                     local_overflow() || local_nonfinite ? 1.0f : 0.0f, stop_request ? 1.0f : 0.0f};
  dp_.all_reduce(totals, DType::kF32, 4, 1.0f, comm::Phase::kOther).wait();
  result.stop = totals[3] > 0;
  result.loss = totals[0] / (double(k) * dp_.size());
  result.skipped = totals[2] > 0 || !std::isfinite(totals[1]);
  scaler_.update(result.skipped);
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
  cpu::AdamWHyper hyper = config_.adam;
  hyper.lr = lr;
  const float grad_scale = float(clip / result.loss_scale);
  const int shard = shard_index();
  for (int u = 0; u < int(partition_.units().size()); ++u) {
    const UnitPartition& unit = partition_.unit(u);
    const Partition::Range r = partition_.owned_model_range(u, shard);
    const int64_t at = unit.shard_offset;
    adamw_step_range(table_, r.begin, r.end, master_ + at, grad_ + at, adam_m_ + at, adam_v_ + at, hyper,
                     applied_steps_, grad_scale);
  }
  weights_changed();  // hpZ copies never outlive a weight change
  result.optimizer_ms = since(optimizer_start);
  return result;
}

double ZeroEngine::evaluate(const MicroBatch& micro_batch) {
  float loss = float(forward(micro_batch, false, comm::Phase::kEval));
  dp_.all_reduce(&loss, DType::kF32, 1, 1.0f / float(dp_.size()), comm::Phase::kEval).wait();
  return loss;
}

void ZeroEngine::set_training_state(int64_t applied_steps, const LossScaler::State& scaler) {
  applied_steps_ = applied_steps;
  scaler_.restore(scaler);
}

void ZeroEngine::weights_changed() {
  refresh_compute_weights();
  if (gatherer_) gatherer_->drop_secondaries();
}

void ZeroEngine::load_model_weights(const float* model_layout) {
  const int64_t S = partition_.shard_total();
  std::fill(master_, master_ + S, 0.0f);
  std::fill(adam_m_, adam_m_ + S, 0.0f);
  std::fill(adam_v_, adam_v_ + S, 0.0f);
  for (int u = 0; u < int(partition_.units().size()); ++u) {
    const Partition::Range r = partition_.owned_model_range(u, shard_index());
    std::copy(model_layout + r.begin, model_layout + r.end, master_ + partition_.unit(u).shard_offset);
  }
  applied_steps_ = 0;
  weights_changed();
}

size_t ZeroEngine::hpz_secondary_peak_bytes() const {
  return gatherer_ ? gatherer_->secondary_bytes_peak() : 0;
}

std::vector<float> ZeroEngine::gather_master() {
  const int64_t S = partition_.shard_total();
  std::vector<float> padded(partition_.padded_total());
  if (partition_.num_shards() == 1) {
    std::copy(master_, master_ + S, padded.begin());
  } else {
    std::vector<float> all(size_t(S) * dp_.size());
    dp_.all_gather(master_, all.data(), S * sizeof(float), comm::Phase::kOther).wait();
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
  const double P = double(partition_.padded_total()), W = dp_.size();
  const double cb = double(wire_bytes(config_.precision));
  const int s = config_.stage;
  auto usage = [&](const std::string& category) -> size_t {
    for (const auto& c : arena_.usage_by_category()) {
      if (c.category == category) return c.peak_bytes;
    }
    return 0;
  };
  const std::string c = cb == 2 ? "2" : "4";
  std::vector<MemoryLine> lines;
  lines.push_back({"compute weights", usage("compute weights"), s == 3 ? c + "P/W" : c + "P",
                   s == 3 ? cb * P / W : cb * P});
  lines.push_back({"master", usage("master"), s >= 1 ? "4P/W" : "4P", s >= 1 ? 4 * P / W : 4 * P});
  lines.push_back({"moments", usage("moments"), s >= 1 ? "8P/W" : "8P", s >= 1 ? 8 * P / W : 8 * P});
  lines.push_back({"gradients", usage("gradients"), s >= 2 ? "4P/W" : "4P", s >= 2 ? 4 * P / W : 4 * P});
  if (config_.hpz_partition_size > 1) {
    // The formula: P/h elements of what the wire carries (1 byte plus scales with qwZ).
    const double h = config_.hpz_partition_size;
    const std::string bytes = config_.quantized_weights ? "(1+4/B)" : c;
    const double per = config_.quantized_weights ? 1.0 + 4.0 / config_.weight_block : cb;
    lines.push_back({"hpz secondary", usage("hpz secondary"), bytes + "P/h", per * P / h});
  }
  lines.push_back({"buffers", usage("buffers"), "", 0});
  size_t activations = residual_.size() * sizeof(float) + dresidual_.size() * sizeof(float) +
                       recompute_out_.size() * sizeof(float) + scratch_.bytes() + head_.bytes();
  for (const auto& block : blocks_) activations += block.bytes();
  lines.push_back({"activations", activations, "", 0});
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
    out << "\n";
  }
  out << "  total            " << format_bytes(total) << "\n";
  return out.str();
}

}  // namespace gpt
