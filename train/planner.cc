// The planner's numbers: memory per GPU, bytes per step and predicted time for each configuration; see
// planner.h. The text and JSON are written in planner_report.cc.
//
// Memory: the model states by ZeRO's formulas (zero/memory_model.h), which the engine's own memory table
// checks itself against; the buffers (gathered units, unit gradients, gradient buckets, qgZ's stages, ...)
// as the engine's arenas hold them at their peak in a dry run of the configuration (zero/dry_run.h: the real
// engine over memory that is only counted, one step walked without arithmetic), so the order in which the
// engine acquires and releases them is stated once, in the engine; the activations by the restated count of
// the layer loop's tensors (activation_formulas.h) in the compute dtype on a GPU (MemoryTarget::kGpu, the
// head a chunk of logits: the CUDA backend fuses the classifier without tensor parallelism; attention's
// residual what CudaOps keeps, kernels/attention_residual.h) and in fp32 on the CPU backend
// (MemoryTarget::kCpu, the probabilities), which also counts what lives outside the arenas: the MPI ring's
// staging and the engine's start-up copy. gpt_train's memory guard uses the CPU count.
#include "train/planner.h"

#include <algorithm>

#include "base/user_error.h"
#include "kernels/attention_residual.h"
#include "model/loop.h"
#include "model/params.h"
#include "train/activation_formulas.h"
#include "train/planner_pipeline.h"
#include "zero/context.h"
#include "zero/dry_run.h"
#include "zero/engine.h"
#include "zero/memory_model.h"
#include "zero/offload_layout.h"
#include "zero/partition.h"
#include "zero/pipeline_schedule.h"
#include "zero/reduce.h"
#include "zero/tensor_parallel_traffic.h"
#include "zero/traffic_model.h"

namespace gpt {
namespace {

struct Combination {
  const char* name;
  bool qwz, hpz, qgz;
};
constexpr Combination kCombinations[] = {
    {"zero3", false, false, false}, {"qwz", true, false, false},    {"hpz", false, true, false},
    {"qgz", false, false, true},    {"qwz+hpz", true, true, false}, {"qwz+qgz", true, false, true},
    {"hpz+qgz", false, true, true}, {"zeropp", true, true, true},
};

Partition make_partition(const ParamTable& table, const ZeroConfig& zero, int world) {
  return Partition(table, world, zero.stage == 0 ? 1 : world);
}

// The order in which the units' gradients become final, which is the order the reducer fills its buckets in
// (model/loop.h): the reverse of the forward, each tile's right after its backward when tiled.
std::vector<int> gradient_order(const Partition& p, const ZeroConfig& z) {
  return loop_schedule(int(p.units().size()), z.tile_factor, z.recompute).gradients;
}

// The ring's staging buffers (comm/mpi_collectives.cc): min(W-1, 2) receive and min(W-2, 2) send buffers of
// the largest chunk, allocated outside any arena while a reduce-scatter (or an all-reduce's first half) runs.
double ring_staging_bytes(int world, int64_t chunk_elements, double element_bytes) {
  if (world < 2) return 0;
  const int buffers = std::min(world - 1, 2) + std::min(world - 2, 2);
  return buffers * double(chunk_elements) * element_bytes;
}

// The MPI ring's staging on the CPU backend, beside the engine's arenas: stage 0's all-reduce (chunks of
// P/W, and the fp32 sum of one chunk), stage 1's reduce-scatter of the whole gradient, the buckets' of stages
// 2-3 (none with qgZ across nodes: its all-to-all sends from the engine's own buffers).
double cpu_staging_bytes(const Partition& p, const ZeroConfig& z, int nodes) {
  const double cb = double(dtype_size(z.precision));
  if (z.stage == 0) {
    const int64_t chunk = (p.padded_total() + p.world_size() - 1) / p.world_size();
    return ring_staging_bytes(p.world_size(), chunk, cb) + 4.0 * double(chunk);
  }
  if (z.stage == 1) return ring_staging_bytes(p.world_size(), p.shard_total(), cb);
  if (z.quantized_gradients && nodes >= 2) return 0;
  int64_t largest = 0;
  for (const std::vector<int>& bucket : plan_buckets(p, gradient_order(p, z), z.reduce_bucket_size)) {
    int64_t chunk = 0;
    for (int u : bucket) chunk += p.unit(u).shard;
    largest = std::max(largest, chunk);
  }
  return ring_staging_bytes(p.world_size(), largest, cb);
}

// The engine's buffers, as its own arenas hold them at their peak in a dry run of this configuration
// (zero/dry_run.h): the whole ("buffers") and its parts, device and wire memory together (on a GPU the
// gathered units, buckets and qgZ's stages live in device memory with NCCL).
double add_dry_run_buffers(const DryRunMemory& dry, PlanMemory& m) {
  for (const auto& [part, bytes] : dry.parts("buffers"))
    m.buffers.push_back({part, double(bytes), "the engine's arenas at their peak (dry run)"});
  return double(dry.peak("buffers"));
}

// Tiers in memory and on disk, and the swap traffic of one step (planner.h).
void add_offload(const Partition& p, const ZeroConfig& z, int accumulation_steps, PlanMemory& m) {
  // Offload device "cpu" puts a state in the "cpu" tier (zero/memory_model.h): host memory beside a GPU, RAM
  // on the CPU backend, where every tier but "nvme" is RAM.
  for (const PlanMemoryLine& line : m.states) {
    double& tier = line.tier == "nvme" ? m.tiers.nvme : line.tier == "cpu" ? m.tiers.cpu : m.tiers.device;
    if (line.tier != "nvme") tier += line.bytes;
  }
  const OffloadLayout layout = make_offload_layout(p, z);
  m.tiers.nvme = double(layout.optimizer_file_bytes + layout.param_file_bytes);
  const double S = double(p.shard_total()), cb = double(dtype_size(z.precision));
  if (z.offload.optimizer_on_nvme()) {
    m.offload.nvme_read += 12 * S;
    m.offload.nvme_written += 12 * S;
  }
  if (z.offload.param_on_nvme()) {
    // A unit's shard is read for each gather: once per pass, and the tiles that a tiled block's
    // recomputation gathers once more in the backward.
    const LoopSchedule s = loop_schedule(int(p.units().size()), z.tile_factor, z.recompute);
    std::vector<bool> seen(p.units().size(), false);
    double regathered = 0;
    for (int u : s.backward) {
      if (seen[size_t(u)]) regathered += double(p.unit(u).shard);
      seen[size_t(u)] = true;
    }
    m.offload.param_read_forward = accumulation_steps * cb * S;
    m.offload.param_read_backward = accumulation_steps * cb * (S + regathered);
    m.offload.nvme_read += m.offload.param_read_forward + m.offload.param_read_backward;
    m.offload.nvme_written += cb * S;
  }
}

// What the target's backend makes the layer loop allocate differently: the fused classifier (the CUDA
// backend fuses it, the CPU's keeps the whole logits; the loop uses it without tensor parallelism) and
// attention's residual (Ops::attention_residual: the CPU keeps the probabilities; the GPU what CudaOps
// declares, read from the one constant a CPU-only build sees too).
struct TargetBackend {
  bool fused_classifier = false;
  AttentionResidual attention_residual = AttentionResidual::kProbabilities;
};
TargetBackend target_backend(MemoryTarget target) {
  if (target == MemoryTarget::kCpu) return {};
  return {true, cuda_attention_residual()};
}

// Activations per rank under one recomputation: ours (what the layer loop allocates, restated tensor by
// tensor; equal to activation_elements at t = 1 on the CPU) and the paper's formula.
struct ActivationPair {
  double ours = 0, paper = 0;
};
ActivationPair activations_at(const GPTConfig& model, const ZeroConfig& z, int micro_batch,
                              int tensor_parallel, int element_bytes, const Recompute& recompute,
                              const TargetBackend& backend) {
  const ActivationShape shape = activation_shape(model, micro_batch);
  ActivationSetup setup{tensor_parallel, z.sequence_parallel && tensor_parallel > 1, recompute,
                        z.distribute_saved_activations};
  if (backend.fused_classifier)
    setup.classifier_rows = classifier_chunk_rows(int64_t(micro_batch) * model.seq_len);
  setup.attention_residual = backend.attention_residual;
  return {double(restated_activations(shape, setup, element_bytes).total_bytes),
          paper_model_bytes(shape, setup)};
}

// The memory's activation lines (ours and the paper's) under no, full, selective and the configured
// recomputation, from `at`'s count of one recomputation.
template <typename At>
void set_activations(const At& at, const Recompute& configured_recompute, PlanMemory& m) {
  const ActivationPair full = at(Recompute{}), checkpointed = at(Recompute::full()),
                       selective = at(Recompute::selective()), configured = at(configured_recompute);
  m.activations_full = full.ours;
  m.activations_checkpointed = checkpointed.ours;
  m.activations_selective = selective.ours;
  m.activations = configured.ours;
  m.activations_paper_full = full.paper;
  m.activations_paper_checkpointed = checkpointed.paper;
  m.activations_paper_selective = selective.paper;
  m.activations_paper = configured.paper;
}

void add_activations(const GPTConfig& model, const ZeroConfig& z, int micro_batch, int tensor_parallel,
                     int element_bytes, const TargetBackend& backend, PlanMemory& m) {
  auto at = [&](const Recompute& r) {
    return activations_at(model, z, micro_batch, tensor_parallel, element_bytes, r, backend);
  };
  set_activations(at, z.recompute, m);
}

// One micro-batch through a pipeline chunk: the count above with the shape's L the chunk's layers, and the
// input and output layers' terms only where the chunk has them (without the head, the residual slot of its
// output, which it sends on, instead of the head's tensors; the paper's embedding mask on the first chunk).
ActivationPair chunk_activations(const GPTConfig& model, const ZeroConfig& z, int micro_batch,
                                 int tensor_parallel, int element_bytes, const Recompute& recompute,
                                 const TargetBackend& backend, const PipelineChunk& chunk) {
  ActivationShape shape = activation_shape(model, micro_batch);
  shape.L = chunk.layers();
  ActivationSetup setup{tensor_parallel, z.sequence_parallel && tensor_parallel > 1, recompute,
                        z.distribute_saved_activations};
  if (backend.fused_classifier)
    setup.classifier_rows = classifier_chunk_rows(int64_t(micro_batch) * model.seq_len);
  setup.attention_residual = backend.attention_residual;
  const RestatedActivations ours = restated_activations(shape, setup, element_bytes);
  // One [b, s, h] per rank ([b, s/t, h] with sequence parallelism), Section 4.3's embedding mask in bytes.
  const double row =
      double(shape.s) * double(shape.b) * double(shape.h) / (setup.sequence_parallel ? tensor_parallel : 1);
  ActivationPair pair{double(ours.total_bytes), double(shape.L) * paper_layer_bytes(shape, setup)};
  if (chunk.embedding) pair.paper += row;
  if (chunk.head) pair.paper += paper_input_output_bytes(shape, setup) - row;
  if (!chunk.head) pair.ours += row * element_bytes - double(ours.bytes_of("input/output"));
  return pair;
}

// A pipeline stage's activations: each of its chunks' micro-batch times the micro-batches it keeps in flight
// through that chunk, under each recomputation.
void add_stage_activations(const GPTConfig& model, const ZeroConfig& z, int micro_batch, int tensor_parallel,
                           int element_bytes, const TargetBackend& backend,
                           const std::vector<PipelineChunk>& chunks, const std::vector<int>& in_flight,
                           PlanMemory& m) {
  auto at = [&](const Recompute& r) {
    ActivationPair sum;
    for (size_t c = 0; c < chunks.size(); ++c) {
      const ActivationPair one =
          chunk_activations(model, z, micro_batch, tensor_parallel, element_bytes, r, backend, chunks[c]);
      sum.ours += in_flight[c] * one.ours;
      sum.paper += in_flight[c] * one.paper;
    }
    return sum;
  };
  set_activations(at, z.recompute, m);
}

double per_rate(double amount, double rate) {
  return rate > 0 ? amount / rate : 0;
}

// The zero-filled buffers one reduction of every bucket allocates per rank (zero/reduce.cc): the packed
// buckets (P elements in the wire dtype; for qgZ fp32, and only the buckets of two or more units) and their
// results (P/W fp32). qgZ's stages (zero/qgz.cc) are written whole before they are read and come without a
// fill (Arena::allocate_for_overwrite).
double reduction_buffer_bytes(const Plan& plan, const ZeroConfig& z) {
  if (z.stage < 2) return 0;
  const double P = double(plan.padded_params), W = plan.data_parallel;
  if (!(z.quantized_gradients && plan.cluster.nodes > 1)) return P * dtype_size(z.precision) + P / W * 4;
  return plan.packed_share * P * 4 + P / W * 4;
}

// The host work of one step per rank (PlanTiming's host_forward, host_backward, optimizer) at PlanOptions'
// rates. Element counts per rank: a stage-3 gather leaves the whole unit on every rank, so a pass decodes
// (or, with qwZ, dequantizes) P elements, hpZ's secondary gathers included; qwZ quantizes the rank's own
// shard once a step; a ring reduce-scatter sums (W-1)/W of P per reduction; qgZ quantizes P and then P/L
// partial sums and dequantizes as many (zero/qgz.h).
void add_host_work(const Plan& plan, const PlanVariant& v, PlanTiming& t) {
  const PlanOptions& c = plan.cluster;
  const ZeroConfig& z = v.zero;
  const double P = double(plan.padded_params), W = plan.data_parallel, k = plan.accumulation_steps;
  const double L = double(c.gpus_per_node) / plan.tensor_parallel;
  const auto sent = [&](comm::Phase phase) {  // what one rank sends, both link classes
    return double(v.traffic.at(phase, comm::Link::kIntraNode) + v.traffic.at(phase, comm::Link::kInterNode)) /
           plan.world;
  };
  t.host_forward = per_rate(sent(comm::Phase::kParamGatherFwd), c.host_comm_bytes_per_s);
  t.host_backward =
      per_rate(sent(comm::Phase::kParamGatherBwd) + sent(comm::Phase::kGradReduce), c.host_comm_bytes_per_s);
  if (z.stage == 3) {
    const double decode = z.quantized_weights ? c.dequantize_elements_per_s : c.decode_elements_per_s;
    t.host_forward +=
        per_rate(k * P, decode) + (z.quantized_weights ? per_rate(P / W, c.quantize_elements_per_s) : 0);
    t.host_backward += per_rate(k * P, decode);
  }
  const double reductions = z.stage >= 2 ? k : 1;  // stages 0 and 1 reduce once, at the step's end
  if (z.quantized_gradients && c.nodes > 1) {
    const double coded = reductions * P * (1 + 1 / L);
    t.host_backward +=
        per_rate(coded, c.quantize_elements_per_s) + per_rate(coded, c.dequantize_elements_per_s);
  } else {
    t.host_backward += per_rate(reductions * P * (W - 1) / W, c.reduce_elements_per_s);
  }
  t.host_backward += per_rate(reductions * reduction_buffer_bytes(plan, z), c.buffer_bytes_per_s);
  t.optimizer = per_rate(z.stage >= 1 ? P / W : P, c.optimizer_elements_per_s);
  // Message steps: a ring over W ranks takes W - 1 per unit, for the forward's and the backward's gathers
  // and for the reduction, each micro-step.
  t.latency = c.link_latency_s * (W - 1) * plan.gather_units * 3 * k;
}

}  // namespace

PlanTiming predict_time(const Plan& plan, const PlanVariant& v, const PlanWork& work) {
  const PlanOptions& c = plan.cluster;
  PlanTiming t;
  const double tokens_per_gpu = double(plan.micro_batch) * plan.accumulation_steps * plan.model.seq_len;
  // A tensor-parallel group computes its micro-batches together, each rank 1/t of every layer's FLOPs.
  const double flops_per_s = c.gpu_tflops * 1e12 * plan.tensor_parallel;
  // The forward is a third of 6N + 12LCT, the backward two thirds; recomputation repeats the forward.
  const double base = work.flops_per_token * tokens_per_gpu;
  t.compute_forward = base / 3 / flops_per_s;
  const double recomputed = work.recompute_flops_per_token * tokens_per_gpu;
  t.compute_backward = (base * 2 / 3 + recomputed) / flops_per_s;
  // The tensor-parallel collectives sit between a layer's GEMMs: the layer waits for them.
  t.tensor_forward = plan.tensor_forward_s;
  t.tensor_backward = plan.tensor_backward_s;
  add_host_work(plan, v, t);
  // Send bytes: each GPU has its own intra-node link; a node's inter-node link carries what all its GPUs
  // send across nodes. The two link classes work at the same time, so a phase takes the slower of the two.
  const comm::Phase phases[3] = {comm::Phase::kParamGatherFwd, comm::Phase::kParamGatherBwd,
                                 comm::Phase::kGradReduce};
  for (int p = 0; p < 3; ++p) {
    t.link[p][0] =
        double(v.traffic.at(phases[p], comm::Link::kIntraNode)) / plan.world / c.intra_node_bytes_per_s;
    t.link[p][1] =
        double(v.traffic.at(phases[p], comm::Link::kInterNode)) / c.nodes / c.inter_node_bytes_per_s;
    t.comm[p] = std::max(t.link[p][0], t.link[p][1]);
  }
  // Overlap hides stage 3's gathers behind the compute of their pass and (stages 2, 3) the bucket
  // reductions behind the backward; what runs between passes (stages 0, 1 reduce at the boundary; stages
  // 1, 2 gather after the optimizer step) is never hidden.
  const bool gathers_overlap = v.zero.overlap_comm && v.zero.stage == 3;
  const bool reduce_overlaps = v.zero.overlap_comm && v.zero.stage >= 2;
  const double fwd = gathers_overlap ? t.comm[0] : 0, bwd = gathers_overlap ? t.comm[1] : 0;
  const double reduce = reduce_overlaps ? t.comm[2] : 0;
  const double serial = (t.comm[0] - fwd) + (t.comm[1] - bwd) + (t.comm[2] - reduce);
  // The disk: a node's GPUs share it, so each moves its bytes at 1/gpus_per_node of the rate. Parameter
  // reads run ahead of their pass's gathers (hidden with overlap_comm, as the gathers are); the optimizer's
  // swap and the parameter writes run between the backward and the next forward and add to the step.
  const PlanOffloadTraffic& io = v.memory.offload;
  const double share = c.gpus_per_node;
  t.nvme_read = io.nvme_read * share / c.nvme_read_bytes_per_s;
  t.nvme_write = io.nvme_written * share / c.nvme_write_bytes_per_s;
  const double hidden_fwd_read =
      v.zero.overlap_comm ? io.param_read_forward * share / c.nvme_read_bytes_per_s : 0;
  const double hidden_bwd_read =
      v.zero.overlap_comm ? io.param_read_backward * share / c.nvme_read_bytes_per_s : 0;
  const double disk_serial = t.nvme_read + t.nvme_write - hidden_fwd_read - hidden_bwd_read;
  // What overlap cannot hide: a pass's gathers run one unit ahead of its compute, so it takes the longer of
  // the two plus one unit of the shorter: compute waits for the first gather, the links for the last unit's
  // compute (the reduction of its gradient). The tied embedding (unit 0) is both passes' first unit (the LM
  // head opens the backward) and the last gradient reduced; its share of P is that unit.
  const double forward_work = t.compute_forward + t.tensor_forward + t.host_forward;
  const double backward_work = t.compute_backward + t.tensor_backward + t.host_backward;
  const double first_gather = plan.first_unit_share * std::min(forward_work, fwd);
  if (ZeroEngine::gathers_ahead(v.zero, plan.pipeline.stages))
    t.ahead = std::min(first_gather, (1 - plan.first_unit_share) * t.optimizer);
  t.exposed = first_gather - t.ahead + plan.first_unit_share * std::min(backward_work, bwd + reduce);
  t.forward_pass = std::max({forward_work, fwd, hidden_fwd_read});
  t.backward_pass = std::max({backward_work, bwd + reduce, hidden_bwd_read});
  t.step = t.forward_pass + t.backward_pass + t.exposed + serial + disk_serial + t.optimizer + t.latency;
  t.tokens_per_s = t.step > 0 ? double(plan.global_batch) * plan.model.seq_len / t.step : 0;
  return t;
}

double PlanMemory::of(const std::string& state) const {
  for (const PlanMemoryLine& line : states) {
    if (line.state == state) return line.bytes;
  }
  return 0;
}

double recompute_flops_per_token(const GPTConfig& model, const Recompute& recompute) {
  const double C = model.hidden, T = model.seq_len, L = model.num_layers;
  // A block's forward is 2 x 12C^2 (its matrices) + 4CT (QK^T and AV) per token.
  if (recompute.is_selective()) return 4 * C * T * L;
  if (!recompute.is_full()) return 0;
  const double layers =
      recompute.method == RecomputeMethod::kUniform ? L : std::min<double>(recompute.num_layers, L);
  return layers * (24 * C * C + 4 * C * T);
}

int64_t activation_elements(const GPTConfig& model, int micro_batch, const Recompute& recompute) {
  const int64_t B = micro_batch, T = model.seq_len, C = model.hidden, L = model.num_layers;
  const int64_t BT = B * T, BTC = BT * C;
  // BlockActivations: ln1, atty, residual2, ln2 [BT,C]; qkv [BT,3C]; fch, fch_gelu [BT,4C]; four [BT]
  // LayerNorm statistics; the attention probabilities [B,NH,T,T].
  const int64_t probs = B * model.heads * T * T;
  const int64_t block = 15 * BTC + 4 * BT + probs;
  const int64_t scratch = 14 * BTC;  // BlockScratch: d_fch_gelu, d_fch, d_qkv, d_ln2, d_atty, d_ln1
  const int64_t head = 2 * BTC + BT * model.padded_vocab() + 4 * BT;  // lnf, dlnf, logits, stats, losses
  const int64_t residual_gradient = BTC;
  // Kept block inputs (and the output) and activation sets (model/recompute.h):
  //   none, selective: every input, L sets (selective: one set of attention probabilities for all);
  //   full uniform N:  each chunk's input, the output, N-1 inner inputs of the chunk being recomputed, N
  //   sets; full block N:    every input, a set for each of the L-N kept blocks and one for the recomputed
  //   block.
  int64_t inputs = L + 1, sets = L, extra = 0;
  if (recompute.is_selective()) extra = -(L - 1) * probs;
  if (recompute.is_full()) {
    extra = BTC;  // the output of a chunk's last block, recomputed and discarded
    if (recompute.method == RecomputeMethod::kUniform) {
      const int64_t n = std::min<int64_t>(recompute.num_layers, L);
      inputs = (L + n - 1) / n + 1 + (n - 1);
      sets = n;
    } else {
      const int64_t n = std::min<int64_t>(recompute.num_layers, L);
      sets = L - n + (n > 0 ? 1 : 0);
    }
  }
  return inputs * BTC + sets * block + extra + scratch + head + residual_gradient;
}

namespace {

// What the CPU backend holds outside the engine's arenas: the MPI ring's staging and the start-up copy.
void add_cpu_lines(const Partition& p, const ZeroConfig& z, int nodes, PlanMemory& m) {
  const double staging = cpu_staging_bytes(p, z, nodes);
  m.states.push_back(
      {"communication staging", staging, "the MPI ring's buffers, outside the arenas", "device", true});
  // The engine initializes master, m and v through a host buffer of min(P/W, sub_group_size) elements each
  // (ZeroEngine::write_state; with the optimizer on NVMe, through the swap buffers instead), before the
  // step's buffers and the ring's staging exist.
  const double S = double(p.shard_total());
  const double startup =
      z.offload.optimizer_on_nvme() ? 0 : 12 * std::min(S, double(z.offload.sub_group_size));
  const double beyond = std::max(0.0, startup - m.of("buffers") - staging);
  if (beyond > 0) {
    m.states.push_back({"start-up copy", beyond,
                        "the engine's host buffer for the initial state, 12 min(P/W, sub_group_size), "
                        "beyond the step's buffers",
                        "device", true});
  }
}

// The "activations" line's formula: what one micro-batch is counted as, and at p > 1 how many are in flight.
std::string activation_formula(const ZeroConfig& z, int tensor_parallel, double element_bytes,
                               const std::vector<int>& in_flight) {
  std::string where;
  if (tensor_parallel > 1) {
    where = ", per rank at t = " + std::to_string(tensor_parallel) +
            (z.sequence_parallel ? " with sequence parallelism" : " without sequence parallelism");
  }
  std::string what = "one micro-batch, ";
  if (!in_flight.empty()) {
    what = "micro-batches in flight (";
    for (size_t c = 0; c < in_flight.size(); ++c) what += (c ? " + " : "") + std::to_string(in_flight[c]);
    what +=
        in_flight.size() > 1 ? " over the stage's chunks) through its layers, " : ") through its layers, ";
  }
  return what + (element_bytes == 2 ? "2" : "4") + " bytes per element" +
         (z.recompute.granularity == RecomputeGranularity::kNone ? ""
                                                                 : ", recompute " + z.recompute.describe()) +
         where;
}

}  // namespace

PlanMemory plan_memory(const GPTConfig& model, const ZeroConfig& z, int nodes, int ranks_per_node,
                       int micro_batch, int accumulation_steps, MemoryTarget target, int tensor_parallel,
                       const PipelineLayout& pipeline, int stage) {
  // One rank's tensor-parallel slice (all slices are the same size), of its pipeline stage's chunks at p > 1,
  // partitioned over its d data-parallel ranks; ZeRO's groups span the nodes of one stage.
  const StagePlacement at =
      stage_placement(model, pipeline, stage, nodes, ranks_per_node, tensor_parallel, accumulation_steps);
  const int data_parallel = nodes * ranks_per_node / (tensor_parallel * pipeline.stages);
  const int dp_nodes = pipeline.stages == 1 ? nodes : at.data_parallel_nodes;
  const ParamTable table =
      rank_param_table(model, z.tile_factor, TensorSlice{tensor_parallel, 0}, pipeline, stage);
  const Partition p = make_partition(table, z, data_parallel);
  const bool cpu = target == MemoryTarget::kCpu;
  // The CPU backend's loop computes in fp32 whatever the compute dtype; the planned GPU's in the compute
  // dtype (the half layer loop, its statistics in fp32: layer_loop_compute, zero/context.h).
  const double ab = cpu ? 4 : double(dtype_size(z.precision));
  PlanMemory m;
  for (const StateFormula& f : zero_state_formulas(p, z, dp_nodes)) {
    m.states.push_back({f.state, f.bytes, f.formula, f.tier});
    if (f.tier != "nvme") m.model_states += f.bytes;
  }
  const DryRunMemory dry = dry_run(DryRunSetup{model, z, nodes, ranks_per_node, tensor_parallel, micro_batch,
                                               accumulation_steps, pipeline, stage});
  m.states.push_back({"buffers", add_dry_run_buffers(dry, m), "below"});
  if (cpu) add_cpu_lines(p, z, dp_nodes, m);
  if (pipeline.stages == 1) {
    add_activations(model, z, micro_batch, tensor_parallel, int(ab), target_backend(target), m);
  } else {
    add_stage_activations(model, z, micro_batch, tensor_parallel, int(ab), target_backend(target), at.chunks,
                          at.in_flight, m);
    // The CPU backend holds what its layer loops allocate (gpt_train's memory guard counts that).
    if (cpu) m.activations = double(dry.activation_bytes);
  }
  m.states.push_back(
      {"activations", m.activations, activation_formula(z, tensor_parallel, ab, at.in_flight)});
  add_offload(p, z, accumulation_steps, m);
  for (const PlanMemoryLine& line : m.states) {
    if (line.tier != "nvme") m.total += line.bytes;
  }
  return m;
}

namespace {

// Why the plan cannot use the configured tensor-parallel size on the cluster (empty when it can): the
// layout's rules (ParallelLayout::problems, model/params.h), which gpt_train's options and the engine ask
// too.
std::string tensor_parallel_problem(const TrainOptions& o) {
  const ParallelLayout layout{.tensor_parallel = o.tensor_parallel,
                              .ranks_per_node = o.plan.gpus_per_node,
                              .node_flag = "--gpus-per-node",
                              .sequence_parallel = o.zero.sequence_parallel,
                              .tile_factor = o.zero.tile_factor};
  return first_problem(layout.problems(o.model));
}

void check_plannable(const TrainOptions& o) {
  const PlanOptions& c = o.plan;
  if (c.nodes < 1 || c.gpus_per_node < 1) {
    throw UsageError(
        "--nodes and --gpus-per-node must be at least 1, for example --nodes 4 --gpus-per-node 16");
  }
  if (!(c.gpu_memory_bytes > 0 && c.intra_node_bytes_per_s > 0 && c.inter_node_bytes_per_s > 0 &&
        c.gpu_tflops > 0 && c.nvme_read_bytes_per_s > 0 && c.nvme_write_bytes_per_s > 0)) {
    throw UsageError(
        "--gpu-memory, --intra-node-bandwidth, --inter-node-bandwidth, --gpu-tflops, --nvme-read-bandwidth "
        "and --nvme-write-bandwidth must be positive");
  }
  if (std::string problem = o.model.validate(); !problem.empty()) throw UsageError(problem);
  if (o.micro_batch < 1 || o.accumulation_steps < 1) {
    throw UsageError("the micro-batch and the accumulation steps must be at least 1");
  }
  if (std::string problem = tensor_parallel_problem(o); !problem.empty()) throw UsageError(problem);
}

// The configured stage (when below 3) and every stage 3 combination of qwZ, hpZ and qgZ, over the
// data-parallel topology `dp`; hpZ's h is the configured one, else the data-parallel ranks per node.
std::vector<PlanVariant> zero_variants(const ZeroConfig& zero, const comm::Topology& dp,
                                       int tensor_parallel) {
  std::vector<PlanVariant> variants;
  const int h = zero.hpz_partition_size > 1 ? zero.hpz_partition_size : dp.ranks_per_node;
  if (zero.stage != 3) {
    PlanVariant v;
    v.name = "stage " + std::to_string(zero.stage);
    v.zero = zero;
    v.configured = true;
    v.problem = first_problem(zero.problems(dp));
    variants.push_back(v);
  }
  for (const Combination& combo : kCombinations) {
    PlanVariant v;
    v.name = combo.name;
    v.zero = zero;
    v.zero.stage = 3;
    v.zero.quantized_weights = combo.qwz;
    v.zero.hpz_partition_size = combo.hpz ? h : 1;
    v.zero.quantized_gradients = combo.qgz;
    v.zero.loco = zero.loco && combo.qgz;  // the configured error feedback goes with qgZ
    v.configured = zero.stage == 3 && zero.quantized_weights == combo.qwz &&
                   (zero.hpz_partition_size > 1) == combo.hpz && zero.quantized_gradients == combo.qgz;
    v.problem = first_problem(v.zero.problems(dp));
    if (v.problem.empty() && combo.hpz && h < 2) {
      v.problem = tensor_parallel > 1
                      ? "hpZ needs at least 2 data-parallel ranks per node (GPUs per node / t)"
                      : "hpZ needs at least 2 GPUs per node";
    }
    variants.push_back(v);
  }
  return variants;
}

// Why the plan cannot run the configured pipeline stages on the cluster (empty when it can): the layout's
// rules, t x p dividing the world, the schedule's rule for m micro-batches (the accumulation steps).
std::string pipeline_problem(const TrainOptions& o) {
  const int p = o.pipeline.stages, world = o.plan.nodes * o.plan.gpus_per_node;
  if (std::string problem = first_problem(o.pipeline.problems(o.model)); !problem.empty()) return problem;
  if (p == 1) return "";
  if (world % (o.tensor_parallel * p) != 0) {
    return "--tensor-model-parallel-size " + std::to_string(o.tensor_parallel) +
           " x --pipeline-model-parallel-size " + std::to_string(p) + " does not divide the " +
           std::to_string(world) + " GPUs";
  }
  return pipeline_schedule_problem(p, o.pipeline.virtual_stages(o.model), o.accumulation_steps);
}

// The plan's sizes, parameters and tensor-parallel collectives: everything but the ZeRO variants.
Plan plan_setup(const TrainOptions& o) {
  const PlanOptions& c = o.plan;
  Plan plan;
  plan.model = o.model;
  plan.cluster = c;
  plan.world = c.nodes * c.gpus_per_node;
  const int t = o.tensor_parallel, p = o.pipeline.stages;
  plan.tensor_parallel = t;
  plan.data_parallel = plan.world / (t * p);
  plan.pipeline = o.pipeline;
  plan.virtual_stages = o.pipeline.virtual_stages(o.model);
  plan.bubble_formula = pipeline_bubble_formula(p, plan.virtual_stages, o.accumulation_steps);
  plan.sequence_parallel = o.zero.sequence_parallel && t > 1;
  plan.distribute_saved_activations = o.zero.distribute_saved_activations && t > 1;
  plan.micro_batch = o.micro_batch;
  plan.accumulation_steps = o.accumulation_steps;
  const int64_t batch = int64_t(o.micro_batch) * o.accumulation_steps * plan.data_parallel;
  plan.global_batch = batch;
  if (o.global_batch != 0 && o.global_batch != batch) {
    plan.notes.push_back("the global batch " + std::to_string(o.global_batch) + " is not micro-batch x " +
                         (t > 1 || p > 1 ? "accumulation x data-parallel ranks" : "accumulation x GPUs") +
                         "; planned with " + std::to_string(batch));
  }
  const ParamTable table = make_param_table(o.model, o.zero.tile_factor);
  plan.params = table.total;
  plan.params_for_flops = o.model.params_without_positions();
  const ParamTable slice = make_param_table(o.model, o.zero.tile_factor, TensorSlice{t, 0});
  const Partition partition(slice, plan.data_parallel, plan.data_parallel);
  plan.padded_params = partition.padded_total();
  plan.gather_units = int(partition.units().size());
  plan.first_unit_share = double(partition.unit(0).padded) / double(plan.padded_params);
  for (const std::vector<int>& bucket :
       plan_buckets(partition, gradient_order(partition, o.zero), o.zero.reduce_bucket_size)) {
    if (bucket.size() < 2) continue;
    for (int u : bucket) plan.packed_share += double(partition.unit(u).padded) / double(plan.padded_params);
  }
  plan.flops_per_token =
      o.model.model_flops_per_token() + recompute_flops_per_token(o.model, o.zero.recompute);
  // A GPU's layer loop moves its compute dtype's activations (the half loop at --bf16/--fp16).
  plan.tensor_traffic = expected_tensor_parallel_traffic(
      TensorTrafficInput{o.model, o.micro_batch, o.accumulation_steps, t, plan.data_parallel,
                         plan.sequence_parallel, o.zero.recompute, plan.distribute_saved_activations,
                         layer_loop_compute(o.zero.precision, o.zero.precision)});
  const auto seconds = [&](comm::Phase phase) {
    return double(plan.tensor_traffic.at(phase, comm::Link::kIntraNode)) / plan.world /
           c.intra_node_bytes_per_s;
  };
  plan.tensor_forward_s = seconds(comm::Phase::kTpFwd);
  plan.tensor_backward_s = seconds(comm::Phase::kTpBwd) + seconds(comm::Phase::kActGather);
  return plan;
}

// The plan of the configured setup, without the tensor-parallel sweep; configured_only: of the configured
// ZeRO variant alone (what a sweep row reads).
Plan plan_of(const TrainOptions& o, bool configured_only = false) {
  check_plannable(o);
  if (std::string problem = pipeline_problem(o); !problem.empty()) throw UsageError(problem);
  const PlanOptions& c = o.plan;
  Plan plan = plan_setup(o);
  const int t = o.tensor_parallel, p = o.pipeline.stages;
  ZeroConfig zero = o.zero;
  zero.sequence_parallel = plan.sequence_parallel;
  const comm::Topology world{plan.world, 0, c.gpus_per_node, false};
  const comm::Topology dp = ZeroEngine::data_parallel_topology(world, t, 0, p);
  plan.variants = zero_variants(zero, dp, t);
  for (size_t i = 0; i < plan.variants.size(); ++i) {
    PlanVariant& v = plan.variants[i];
    if (v.configured) plan.configured = int(i);
    if (!v.problem.empty() || (configured_only && !v.configured)) continue;  // nothing to count
    if (p > 1) {
      plan_pipeline_variant(plan, v);
      continue;
    }
    v.memory = plan_memory(o.model, v.zero, c.nodes, c.gpus_per_node, o.micro_batch, o.accumulation_steps,
                           MemoryTarget::kGpu, t);
    v.traffic = plan_step_traffic(o.model, v.zero, c.nodes, c.gpus_per_node, o.accumulation_steps, t);
    v.timing = predict_time(
        plan, v,
        PlanWork{o.model.model_flops_per_token(), recompute_flops_per_token(o.model, v.zero.recompute)});
  }
  if (c.nodes == 1) plan.notes.push_back("one node: qgZ falls back to the ring reduce-scatter");
  return plan;
}

// One sweep row: the configured options at tensor-parallel size t, with or without sequence parallelism.
// hpZ's h shrinks to the data-parallel ranks per node where the configured h does not divide them.
PlanTensorRow sweep_row(const TrainOptions& configured, int t, bool sequence_parallel) {
  TrainOptions o = configured;
  o.tensor_parallel = t;
  o.zero.sequence_parallel = sequence_parallel;
  o.zero.distribute_saved_activations = configured.zero.distribute_saved_activations && t > 1 &&
                                        !sequence_parallel && o.zero.recompute.is_full();
  o.global_batch = 0;
  PlanTensorRow row;
  row.t = t;
  row.d = o.plan.nodes * o.plan.gpus_per_node / (t * o.pipeline.stages);
  row.sequence_parallel = sequence_parallel;
  row.global_batch = int64_t(o.micro_batch) * o.accumulation_steps * row.d;
  row.problem = tensor_parallel_problem(o);
  if (!row.problem.empty()) return row;
  const int per_node = o.plan.gpus_per_node / t, h = o.zero.hpz_partition_size;
  if (h > 1 && per_node % h != 0) o.zero.hpz_partition_size = per_node >= 2 ? per_node : 1;
  row.hpz = o.zero.hpz_partition_size;
  Plan plan;
  try {
    plan = plan_of(o, true);
  } catch (const UsageError& e) {  // a pipeline stage's t x d ranks on no whole number of nodes
    row.problem = e.what();
    return row;
  }
  const PlanVariant& v = plan.variants[plan.configured];
  row.problem = v.problem;
  row.model_states = v.memory.model_states;
  row.activations = v.memory.activations;
  row.activations_paper = v.memory.activations_paper;
  row.memory = v.memory.tiers.device;
  row.fits = row.memory <= o.plan.gpu_memory_bytes;
  row.tensor_bytes = plan.tensor_traffic.total();
  if (!row.problem.empty()) return row;
  row.zero_intra =
      v.traffic.total(comm::Link::kIntraNode) - v.traffic.at(comm::Phase::kPpP2p, comm::Link::kIntraNode);
  row.zero_inter =
      v.traffic.total(comm::Link::kInterNode) - v.traffic.at(comm::Phase::kPpP2p, comm::Link::kInterNode);
  row.step = v.timing.step;
  row.tokens_per_s = v.timing.tokens_per_s;
  return row;
}

// t = 1, 2, 4, 8 and the configured t, those that keep a group inside one node; without and (t > 1) with
// sequence parallelism.
std::vector<PlanTensorRow> tensor_sweep(const TrainOptions& o) {
  std::vector<int> sizes = {1, 2, 4, 8};
  if (std::find(sizes.begin(), sizes.end(), o.tensor_parallel) == sizes.end())
    sizes.push_back(o.tensor_parallel);
  std::vector<PlanTensorRow> rows;
  for (int t : sizes) {
    if (o.plan.gpus_per_node % t != 0) continue;
    for (bool sp : {false, true}) {
      if (sp && t == 1) continue;
      rows.push_back(sweep_row(o, t, sp));
    }
  }
  return rows;
}

}  // namespace

Plan make_plan(const TrainOptions& o) {
  Plan plan = plan_of(o);
  plan.tensor_sweep = tensor_sweep(o);
  return plan;
}

}  // namespace gpt
