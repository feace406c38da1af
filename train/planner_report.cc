// The planner's report: the text a user reads and one JSON line with the same numbers for scripts and
// tests. Sizes are decimal (1 GB = 1e9 bytes), as --gpu-memory 32GB is.
#include <cctype>
#include <cstdarg>
#include <cstdio>
#include <sstream>

#include <nlohmann/json.hpp>

#include "train/planner.h"
#include "zero/engine.h"
#include "zero/qgz.h"

namespace gpt {
namespace {

using comm::Link;
using comm::Phase;

constexpr Phase kPhases[3] = {Phase::kParamGatherFwd, Phase::kParamGatherBwd, Phase::kGradReduce};

std::string format(const char* pattern, ...) {
  char text[512];
  va_list args;
  va_start(args, pattern);
  std::vsnprintf(text, sizeof text, pattern, args);
  va_end(args);
  return text;
}

std::string size_text(double bytes) {
  if (bytes >= 1e12) return format("%.2f TB", bytes / 1e12);
  if (bytes >= 1e9) return format("%.2f GB", bytes / 1e9);
  if (bytes >= 1e6) return format("%.1f MB", bytes / 1e6);
  if (bytes >= 1e3) return format("%.1f KB", bytes / 1e3);
  return format("%.0f B", bytes);
}

std::string ms_text(double seconds) {
  return format(seconds * 1e3 >= 100 ? "%.0f ms" : "%.1f ms", seconds * 1e3);
}

// 18437959680 -> "18,437,959,680"
std::string grouped(int64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string on_off(bool on) {
  return on ? "on" : "off";
}

// " x p = 4 pipeline stages (1F1B, m = 8 micro-batches a step)": the parallelism line's pipeline part.
std::string pipeline_words(const Plan& plan) {
  const int p = plan.pipeline.stages, v = plan.virtual_stages;
  if (p == 1) return "";
  return format(
      " x p = %d pipeline stages (%s, m = %d micro-batches a step; ranks ordered tensor, data, "
      "pipeline)",
      p, v == 1 ? "1F1B" : format("interleaved, v = %d chunks a stage", v).c_str(), plan.accumulation_steps);
}

void configuration(std::ostream& out, const Plan& plan, const PlanVariant& v) {
  const GPTConfig& m = plan.model;
  const PlanOptions& c = plan.cluster;
  const ZeroConfig& z = v.zero;
  out << "Configuration\n";
  out << format(
      "  model       %d layers, hidden %d, %d heads of %d, sequence %d, vocabulary %d (padded %d), "
      "%d positions\n",
      m.num_layers, m.hidden, m.heads, m.head_size(), m.seq_len, m.vocab, m.padded_vocab(), m.max_positions);
  out << "  parameters  " << format("%.2f B", plan.params / 1e9) << " (" << grouped(plan.params)
      << "); 6N's N = " << grouped(plan.params_for_flops)
      << " (no position table); padded P = " << grouped(plan.padded_params)
      << (plan.tensor_parallel > 1 ? " per tensor-parallel slice" : "") << "\n";
  out << format("  cluster     %d nodes x %d GPUs = %d GPUs, each with %s and %g TFLOP/s\n", c.nodes,
                c.gpus_per_node, plan.world, size_text(c.gpu_memory_bytes).c_str(), c.gpu_tflops);
  out << format("  links       intra-node %s/s per GPU, inter-node %s/s (%g Gb/s) per node\n",
                size_text(c.intra_node_bytes_per_s).c_str(), size_text(c.inter_node_bytes_per_s).c_str(),
                c.inter_node_bytes_per_s * 8 / 1e9);
  out << format(
      "  parallelism t = %d tensor-parallel (consecutive GPUs of a node) x d = %d data-parallel%s; "
      "sequence parallelism %s; recompute %s%s\n",
      plan.tensor_parallel, plan.data_parallel, pipeline_words(plan).c_str(),
      on_off(plan.sequence_parallel).c_str(), z.recompute.describe().c_str(),
      plan.distribute_saved_activations ? "; partitioned activation checkpoints" : "");
  out << "  batch       micro-batch " << plan.micro_batch << " x accumulation " << plan.accumulation_steps
      << " x "
      << (plan.tensor_parallel > 1 || plan.pipeline.stages > 1
              ? std::to_string(plan.data_parallel) + " data-parallel ranks"
              : std::to_string(plan.world) + " GPUs")
      << " = " << plan.global_batch << " sequences = " << grouped(plan.global_batch * m.seq_len)
      << " tokens per step\n";
  out << "  ZeRO        stage " << z.stage << ", " << precision_name(z.precision) << ", overlap_comm "
      << on_off(z.overlap_comm) << ", reduce_bucket_size " << grouped(z.reduce_bucket_size)
      << ", recomputation " << z.recompute.describe() << ", memory-centric tiling "
      << (z.tile_factor > 1 ? std::to_string(z.tile_factor) + " tiles per block matrix" : "off") << "\n";
  out << "  ZeRO++      qwZ " << on_off(z.quantized_weights);
  if (z.quantized_weights) out << " (int8, block " << z.weight_block << ")";
  out << ", hpZ "
      << (z.hpz_partition_size > 1 ? "on (h = " + std::to_string(z.hpz_partition_size) + ")" : "off");
  out << ", qgZ " << on_off(z.quantized_gradients);
  if (z.quantized_gradients) out << " (" << describe_qgz(z) << ")";
  out << " (\"" << v.name << "\" below)\n";
  const OffloadConfig& f = z.offload;
  if (f.optimizer != OffloadDevice::kNone || f.param != OffloadDevice::kNone) {
    out << "  offload     optimizer " << offload_device_name(f.optimizer) << ", parameters "
        << offload_device_name(f.param) << format(", sub_group_size %lld; ", (long long)f.sub_group_size)
        << format("NVMe %s/s read, %s/s write per node\n", size_text(c.nvme_read_bytes_per_s).c_str(),
                  size_text(c.nvme_write_bytes_per_s).c_str());
  }
  if (!v.problem.empty()) out << "  PROBLEM     " << v.problem << "\n";
}

bool offloaded(const ZeroConfig& z) {
  return z.offload.optimizer != OffloadDevice::kNone || z.offload.param != OffloadDevice::kNone;
}

// Memory per tier and the swap traffic of a step, when anything is offloaded.
void tiers(std::ostream& out, const PlanVariant& v) {
  if (!offloaded(v.zero)) return;
  const PlanMemory& m = v.memory;
  out << format("  %-18s %10s  device, %s cpu (host memory beside the GPU), %s nvme (swap files)\n",
                "per tier", size_text(m.tiers.device).c_str(), size_text(m.tiers.cpu).c_str(),
                size_text(m.tiers.nvme).c_str());
  out << format(
      "  %-18s %10s  read and %s written per step (12P/W each way for the optimizer; the\n"
      "                                compute-weight shard read per gather pass, written once)\n",
      "NVMe traffic", size_text(m.offload.nvme_read).c_str(), size_text(m.offload.nvme_written).c_str());
}

// The paper's per-layer closed form for a recomputation at the plan's t and sequence parallelism, as
// activation_formulas.h writes them.
std::string paper_layer_formula(const Plan& plan, const Recompute& recompute) {
  const bool tp = plan.tensor_parallel > 1, sp = plan.sequence_parallel;
  if (recompute.is_full()) return sp ? "2sbh/t" : "2sbh";
  if (recompute.is_selective()) return sp ? "34sbh/t" : tp ? "sbh(10 + 24/t)" : "34sbh";
  return sp ? "sbh/t (34 + 5as/h)" : tp ? "sbh(10 + 24/t + 5as/(ht))" : "sbh(34 + 5as/h)";
}

// The paper's counts beside ours (Korthikanti et al., Sections 4.1 and 4.3).
void paper_activations(std::ostream& out, const Plan& plan, const PlanMemory& m) {
  out << "    the paper's formulas (Korthikanti et al.: 2 bytes per activation, 1 per dropout mask; L layers "
         "+ input/output)\n";
  const std::pair<const char*, Recompute> rows[3] = {
      {"paper, full", Recompute::full()}, {"paper, selective", Recompute::selective()}, {"paper, none", {}}};
  const double bytes[3] = {m.activations_paper_checkpointed, m.activations_paper_selective,
                           m.activations_paper_full};
  for (int i = 0; i < 3; ++i) {
    out << format("    %-16s %10s  L x %s + the input and output layers\n", rows[i].first,
                  size_text(bytes[i]).c_str(), paper_layer_formula(plan, rows[i].second).c_str());
  }
}

void memory(std::ostream& out, const Plan& plan, const PlanVariant& v) {
  const PlanMemory& m = v.memory;
  if (!v.problem.empty()) {
    out << "\nMemory per GPU, " << v.name << ": not planned, the engine would refuse it (PROBLEM above)\n";
    return;
  }
  if (plan.pipeline.stages > 1) {
    out << "\nMemory per GPU, " << v.name << ", pipeline stage " << v.busiest_stage << " of "
        << plan.pipeline.stages << ", the one that needs the most (P padded parameters of its chunks"
        << (plan.tensor_parallel > 1 ? "' tensor-parallel slice" : "") << ", W = d = " << plan.data_parallel
        << " data-parallel ranks, t = " << plan.tensor_parallel;
  } else if (plan.tensor_parallel > 1) {
    out << "\nMemory per GPU, " << v.name
        << " (P padded parameters of a tensor-parallel slice, W = d = " << plan.data_parallel
        << " data-parallel ranks, t = " << plan.tensor_parallel;
  } else {
    out << "\nMemory per GPU, " << v.name << " (P padded parameters, W = " << plan.world << " GPUs";
  }
  if (v.zero.hpz_partition_size > 1) out << ", h = " << v.zero.hpz_partition_size;
  if (v.zero.quantized_weights) out << ", B = qwZ block " << v.zero.weight_block;
  out << ")\n";
  for (const PlanMemoryLine& line : m.states) {
    std::string formula = line.formula == "below" ? "" : "  " + line.formula;
    if (offloaded(v.zero)) formula = "  [" + line.tier + "]" + formula;
    out << format("  %-18s %10s%s\n", line.state.c_str(), size_text(line.bytes).c_str(), formula.c_str());
    if (line.state != "buffers") continue;  // its parts follow it
    for (const PlanMemoryLine& part : m.buffers) {
      out << format("    %-16s %10s  %s\n", part.state.c_str(), size_text(part.bytes).c_str(),
                    part.formula.c_str());
    }
  }
  out << format("    %-16s %10s  block inputs, one block's saved tensors, the recomputed output\n",
                "checkpointed", size_text(m.activations_checkpointed).c_str());
  out << format("    %-16s %10s  every block's saved tensors but the attention probabilities, one set\n",
                "selective", size_text(m.activations_selective).c_str());
  out << format("    %-16s %10s  every block's saved tensors\n", "not checkpointed",
                size_text(m.activations_full).c_str());
  paper_activations(out, plan, m);
  // The GPU holds the device tier; the cpu tier is host memory.
  const double margin = plan.cluster.gpu_memory_bytes - m.tiers.device;
  out << format("  %-18s %10s  of %s: %s\n", "total", size_text(m.tiers.device).c_str(),
                size_text(plan.cluster.gpu_memory_bytes).c_str(),
                margin >= 0 ? ("fits, " + size_text(margin) + " to spare").c_str()
                            : ("DOES NOT FIT, " + size_text(-margin) + " over").c_str());
  tiers(out, v);
}

std::string in_flight_text(const std::vector<int>& in_flight) {
  std::string text;
  for (size_t c = 0; c < in_flight.size(); ++c) text += (c ? "+" : "") + std::to_string(in_flight[c]);
  return text;
}

// Each pipeline stage of the configured variant, the bubble and the pipeline's own bytes (p > 1).
void pipeline_stages(std::ostream& out, const Plan& plan) {
  if (plan.pipeline.stages == 1) return;
  const PlanVariant& v = plan.variants[plan.configured];
  if (!v.problem.empty()) return;
  const PlanTiming& t = v.timing;
  out << "\nPipeline stages, " << v.name << pipeline_words(plan) << "\n"
      << "  per GPU; in flight: micro-batches a stage keeps at once (per chunk); op: one chunk's forward or\n"
      << "  backward of one micro-batch, its message to the next stage included; * the stage planned above\n";
  out << format("    %5s %6s %6s %9s %10s %11s %10s %9s %9s  %s\n", "stage", "layers", "FLOPs", "in flight",
                "states", "activations", "memory", "fwd op", "bwd op", "split");
  for (const PlanStage& r : plan.stages) {
    out << format("  %s%5d %6d %5.1f%% %9s %10s %11s %10s %9s %9s  %s\n",
                  r.stage == v.busiest_stage ? "* " : "  ", r.stage, r.layers, 100 * r.flops_share,
                  in_flight_text(r.in_flight).c_str(), size_text(r.model_states).c_str(),
                  size_text(r.activations).c_str(),
                  (size_text(r.memory) + (r.memory <= plan.cluster.gpu_memory_bytes ? "" : "!")).c_str(),
                  ms_text(r.forward_op).c_str(), ms_text(r.backward_op).c_str(), r.split.c_str());
  }
  out << format(
      "  bubble      (p - 1)/(v m + p - 1) = %.3f; simulated at the slowest stage's ops: %.3f of a %s "
      "timeline\n",
      plan.bubble_formula, t.bubble, ms_text(t.pipeline).c_str());
  const uint64_t intra = v.traffic.at(Phase::kPpP2p, Link::kIntraNode),
                 inter = v.traffic.at(Phase::kPpP2p, Link::kInterNode);
  const char* sends = plan.tensor_parallel == 1 ? ""
                      : plan.sequence_parallel  ? " (each rank its T/t)"
                                                : " x t (the scatter-gather)";
  out << format(
      "  pp_p2p      %s a step (intra %s, inter %s), %s per GPU: 2 (p v - 1) m d B T C x %d bytes%s\n"
      "              one message %s each way\n",
      size_text(double(intra + inter)).c_str(), size_text(double(intra)).c_str(),
      size_text(double(inter)).c_str(), size_text(double(intra + inter) / plan.world).c_str(),
      int(dtype_size(v.zero.precision)), sends, ms_text(t.p2p).c_str());
  out << "  tied wte    its fp32 gradient summed between the first and the last stage once a step (in\n"
      << "              grad_reduce): " << ms_text(t.tied_embedding) << "\n";
}

void traffic(std::ostream& out, const Plan& plan) {
  out << "\nBytes per optimizer step (" << plan.accumulation_steps
      << (plan.accumulation_steps == 1 ? " micro-step" : " micro-steps")
      << ") by phase, from zero/traffic_model.h (the meter's closed forms)\n"
      << "  all: every byte a GPU hands to the transport, added over GPUs; per GPU: all / " << plan.world
      << "\n";
  out << format("    %-9s %-17s %11s %11s %11s %11s\n", "", "phase", "intra, all", "inter, all", "intra/GPU",
                "inter/GPU");
  for (const PlanVariant& v : plan.variants) {
    const std::string mark = v.configured ? "* " : "  ";
    if (!v.problem.empty()) {
      out << "  " << mark << v.name << ": not planned: " << v.problem << "\n";
      continue;
    }
    uint64_t intra = 0, inter = 0;
    for (int p = 0; p < (plan.pipeline.stages > 1 ? 4 : 3); ++p) {
      const Phase phase = p < 3 ? kPhases[p] : Phase::kPpP2p;
      const uint64_t a = v.traffic.at(phase, Link::kIntraNode), e = v.traffic.at(phase, Link::kInterNode);
      intra += a;
      inter += e;
      out << format("  %s%-9s %-17s %11s %11s %11s %11s\n", mark.c_str(), p == 0 ? v.name.c_str() : "",
                    comm::phase_name(phase), size_text(double(a)).c_str(), size_text(double(e)).c_str(),
                    size_text(double(a) / plan.world).c_str(), size_text(double(e) / plan.world).c_str());
    }
    out << format("  %s%-9s %-17s %11s %11s %11s %11s\n", mark.c_str(), "", "total",
                  size_text(double(intra)).c_str(), size_text(double(inter)).c_str(),
                  size_text(double(intra) / plan.world).c_str(),
                  size_text(double(inter) / plan.world).c_str());
  }
}

// The tensor-parallel collectives of a step (zero/tensor_parallel_traffic.h), when t > 1.
void tensor_traffic(std::ostream& out, const Plan& plan) {
  if (plan.tensor_parallel < 2) return;
  const PlanOptions& c = plan.cluster;
  out << "\nTensor-parallel bytes per optimizer step, from zero/tensor_parallel_traffic.h (fp32 activations, "
         "as "
         "our layers\n  send them); all intra-node: a group is t consecutive GPUs of one node\n";
  out << format("    %-17s %11s %11s %11s\n", "phase", "intra, all", "intra/GPU", "time");
  uint64_t total = 0;
  for (Phase p : {Phase::kTpFwd, Phase::kTpBwd, Phase::kActGather}) {
    const uint64_t bytes = plan.tensor_traffic.at(p, Link::kIntraNode);
    total += bytes;
    out << format("    %-17s %11s %11s %11s\n", comm::phase_name(p), size_text(double(bytes)).c_str(),
                  size_text(double(bytes) / plan.world).c_str(),
                  ms_text(double(bytes) / plan.world / c.intra_node_bytes_per_s).c_str());
  }
  out << format("    %-17s %11s %11s %11s\n", "total", size_text(double(total)).c_str(),
                size_text(double(total) / plan.world).c_str(),
                ms_text(double(total) / plan.world / c.intra_node_bytes_per_s).c_str());
}

// The configured setup at t = 1, 2, 4, 8 on the same cluster: what tensor parallelism trades.
void sweep(std::ostream& out, const Plan& plan) {
  if (plan.tensor_sweep.empty()) return;
  const PlanVariant& v = plan.variants[plan.configured];
  out << "\nTensor parallelism on this cluster: " << v.name << ", recompute " << v.zero.recompute.describe()
      << ", micro-batch " << plan.micro_batch << " x accumulation " << plan.accumulation_steps << "\n"
      << "  per GPU: model states, activations (ours: what the layer loop allocates; the paper's formula), "
         "memory (device\n  tier; ! does not fit); per step, all GPUs: tensor-parallel and ZeRO bytes; hpZ's "
         "h "
         "capped at the\n  data-parallel ranks per node\n";
  out << format("    %3s %3s %4s %3s %6s %10s %10s %10s %10s %10s %10s %10s %9s %9s\n", "t", "SP", "d", "h",
                "batch", "states", "act. ours", "act. paper", "memory", "TP bytes", "ZeRO intra",
                "ZeRO inter", "step", "tokens/s");
  for (const PlanTensorRow& r : plan.tensor_sweep) {
    const bool configured = r.t == plan.tensor_parallel && r.sequence_parallel == plan.sequence_parallel;
    out << format("  %s%3d %3s %4d ", configured ? "* " : "  ", r.t, r.sequence_parallel ? "on" : "off", r.d);
    if (r.memory == 0) {  // the tensor-parallel size itself cannot be planned
      out << " not planned: " << r.problem << "\n";
      continue;
    }
    out << format("%3d %6lld %10s %10s %10s %10s %10s", r.hpz, (long long)r.global_batch,
                  size_text(r.model_states).c_str(), size_text(r.activations).c_str(),
                  size_text(r.activations_paper).c_str(), (size_text(r.memory) + (r.fits ? "" : "!")).c_str(),
                  size_text(double(r.tensor_bytes)).c_str());
    if (!r.problem.empty()) {
      out << "  ZeRO not planned: " << r.problem << "\n";
      continue;
    }
    out << format(" %10s %10s %9s %9.0f\n", size_text(double(r.zero_intra)).c_str(),
                  size_text(double(r.zero_inter)).c_str(), ms_text(r.step).c_str(), r.tokens_per_s);
  }
  out << "  * the configuration given\n";
}

bool counts_host_work(const PlanOptions& c) {
  return c.host_comm_bytes_per_s > 0 || c.decode_elements_per_s > 0 || c.dequantize_elements_per_s > 0 ||
         c.quantize_elements_per_s > 0 || c.reduce_elements_per_s > 0 || c.optimizer_elements_per_s > 0 ||
         c.buffer_bytes_per_s > 0 || c.link_latency_s > 0;
}

// The host work's lines of the model (PlanOptions' host rates), or what is left out without them.
void host_model(std::ostream& out, const Plan& plan) {
  const PlanOptions& c = plan.cluster;
  if (!counts_host_work(c)) {
    out << "  not modelled: the optimizer step, codecs and sending on the compute's cores, per-message\n";
    out << "                latency, kernels slower than --gpu-tflops (bench/calibrate's rates add them)\n";
    return;
  }
  const auto rate = [](double r) { return r > 0 ? format("%.3g/s", r) : std::string("not counted"); };
  out << "  host        = work on the compute's cores, added to the compute of its pass, per GPU/rank:\n";
  out << format(
      "                sending: bytes sent / %s; decoding gathers: P per pass / %s (fp16/bf16)\n",
      c.host_comm_bytes_per_s > 0 ? (size_text(c.host_comm_bytes_per_s) + "/s").c_str() : "not counted",
      rate(c.decode_elements_per_s).c_str());
  out << format("                or / %s (qwZ's dequantization); qwZ's own shard P/W / %s; the reduce-\n",
                rate(c.dequantize_elements_per_s).c_str(), rate(c.quantize_elements_per_s).c_str());
  out << format("                scatter's sums P (W-1)/W / %s, or qgZ's codecs P (1 + 1/L) each way\n",
                rate(c.reduce_elements_per_s).c_str());
  out << format("                the reduction's zero-filled buffers (buckets, results, qgZ's stages) / %s\n",
                c.buffer_bytes_per_s > 0 ? (size_text(c.buffer_bytes_per_s) + "/s").c_str() : "not counted");
  out << format("  optimizer   = shard elements / %s, between steps; latency = %.0f us x (W-1) x %d units\n",
                rate(c.optimizer_elements_per_s).c_str(), c.link_latency_s * 1e6, plan.gather_units);
  out << "                x 3 rings per micro-step\n";
}

// The step at p > 1: the model above for each stage alone, then the pipeline's timeline.
void pipeline_model(std::ostream& out, const Plan& plan) {
  if (plan.pipeline.stages == 1) return;
  out << "  pipeline    step = timeline + the most any stage adds outside its passes (exposed, serial\n"
         "                communication, NVMe, optimizer, latency) + the tied wte's gradient sum\n"
         "                a stage's passes: the model above for the stage alone (its chunks' FLOPs, its\n"
         "                table's bytes over its d ranks, its layers' share of the tensor-parallel bytes),\n"
         "                cut into m v ops, each with one message to the next stage (B T C in the compute\n"
         "                dtype; a node's GPUs share its inter-node link), not overlapped\n"
         "                timeline: the schedule over m micro-batches with every op at the slowest stage's\n"
         "                time (simulate_pipeline): the bubble is in it\n"
         "  stages      memory is planned for every stage of the configured variant and for the first,\n"
         "                the last and stage 1 of the others (the middle stages hold stage 1's chunks\n"
         "                with at most its micro-batches in flight); activations per stage: one micro-batch\n"
         "                through its own layers (the head's tensors on the last stage only) times the\n"
         "                micro-batches it keeps in flight\n";
}

// The predicted step time of every variant, one row each.
void timing_table(std::ostream& out, const Plan& plan) {
  const PlanOptions& c = plan.cluster;
  out << "\nPredicted step time (the model below)\n";
  const bool host =
      counts_host_work(c);  // a "host" column: host_forward + host_backward + optimizer + latency
  out << format("    %-9s %9s%s %11s %11s %11s %9s %9s %11s %8s %10s\n", "", "compute",
                host ? "      host" : "", "gather fwd", "gather bwd", "reduce", "NVMe", "step", "tokens/s",
                "vs zero3", "memory");
  double zero3 = 0;
  for (const PlanVariant& v : plan.variants) {
    if (v.name == "zero3") zero3 = v.timing.tokens_per_s;
  }
  for (const PlanVariant& v : plan.variants) {
    if (!v.problem.empty()) continue;
    const PlanTiming& t = v.timing;
    const bool fits = v.memory.tiers.device <= c.gpu_memory_bytes;
    const std::string host_text =
        host ? format(" %9s", ms_text(t.host_forward + t.host_backward + t.optimizer + t.latency).c_str())
             : "";
    out << format("  %s%-9s %9s%s %11s %11s %11s %9s %9s %11.0f %7.2fx %10s%s\n", v.configured ? "* " : "  ",
                  v.name.c_str(), ms_text(t.compute_forward + t.compute_backward).c_str(), host_text.c_str(),
                  ms_text(t.comm[0]).c_str(), ms_text(t.comm[1]).c_str(), ms_text(t.comm[2]).c_str(),
                  ms_text(t.nvme_read + t.nvme_write).c_str(), ms_text(t.step).c_str(), t.tokens_per_s,
                  zero3 > 0 ? t.tokens_per_s / zero3 : 0.0, size_text(v.memory.tiers.device).c_str(),
                  fits ? "" : " (does not fit)");
  }
  out << "  * the configuration given\n";
  if (plan.pipeline.stages > 1) {
    out << "  p > 1: compute, gathers and reduce are the slowest stage's (the stages' most for the phases);\n"
           "  step is the pipeline's (the model below)\n";
  }
  if (plan.tensor_parallel > 1) {
    out << "  compute includes the tensor-parallel collectives: " << ms_text(plan.tensor_forward_s)
        << " in the forward, " << ms_text(plan.tensor_backward_s) << " in the backward\n";
  }
}

// The timing model the table follows, with this plan's inputs.
void timing_model(std::ostream& out, const Plan& plan) {
  const PlanOptions& c = plan.cluster;
  const ZeroConfig& z = plan.variants[plan.configured].zero;
  const double tokens_per_gpu = double(plan.micro_batch) * plan.accumulation_steps * plan.model.seq_len;
  out << "\nThe model\n";
  if (plan.tensor_parallel > 1) {
    out << format(
        "  compute     = FLOPs per token x tokens per group per step / t / %g TFLOP/s, t = %d\n"
        "                + tensor-parallel bytes per GPU / %s/s (serial with the layers)\n",
        c.gpu_tflops, plan.tensor_parallel, size_text(c.intra_node_bytes_per_s).c_str());
  } else {
    out << format("  compute     = FLOPs per token x tokens per GPU per step / %g TFLOP/s\n", c.gpu_tflops);
  }
  const char* recomputed = z.recompute.is_selective() ? " + 4 L C T (the attention cores again)"
                           : z.recompute.is_full()    ? " + R (24 C^2 + 4 C T) (R recomputed blocks)"
                                                      : "";
  out << format("                FLOPs per token = 6N + 12 L C T%s = %.1f GFLOP\n", recomputed,
                plan.flops_per_token / 1e9);
  out << format("                tokens per %s per step = B k T = %.0f\n",
                plan.tensor_parallel > 1 ? "tensor-parallel group" : "GPU", tokens_per_gpu);
  out << "                forward = 1/3 of 6N + 12 L C T, backward = 2/3"
      << (z.recompute.granularity != RecomputeGranularity::kNone ? " + the recomputation\n" : "\n");
  out << format("  comm(phase) = max(intra-node bytes per GPU / %s/s, inter-node bytes per node / %s/s)\n",
                size_text(c.intra_node_bytes_per_s).c_str(), size_text(c.inter_node_bytes_per_s).c_str());
  out << format(
      "                every GPU has its own intra-node link; a node's %d GPUs share its inter-node\n"
      "                link (inter bytes per node = all GPUs' / %d nodes); both link classes run at\n"
      "                once; bytes are what GPUs send (links are full duplex)\n",
      c.gpus_per_node, c.nodes);
  if (z.overlap_comm) {
    out << "  step        = max(compute fwd + host fwd, comm(gather fwd)) + max(compute bwd + host bwd,\n"
           "                comm(gather bwd) + comm(reduce)) + exposed + optimizer + latency\n";
    out << format(
        "                exposed = %.3f x (min(compute fwd + host fwd, comm(gather fwd)) + the same for\n"
        "                the backward): one unit of the shorter side, the tied embedding's share of P,\n"
        "                as it opens both passes and closes the reduction\n",
        plan.first_unit_share);
    if (ZeroEngine::gathers_ahead(z, plan.pipeline.stages)) {
      out << format(
          "                  - min(that forward part, %.3f x optimizer): the next step's first gather\n"
          "                leaves from the optimizer once its unit is updated, and crosses during the rest\n",
          1 - plan.first_unit_share);
    }
    out << "                overlap_comm: stage 3's gathers hide behind the compute of their pass and the\n";
    out << "                bucket reductions behind the backward, whose gathers and reductions share the\n";
    out << "                links; what runs between passes (stages 0-2) adds to the step\n";
  } else {
    out << "  step        = compute + host + comm(gather fwd) + comm(gather bwd) + comm(reduce) + optimizer\n"
           "                + latency (overlap_comm off)\n";
  }
  out << format(
      "  NVMe        = bytes x %d GPUs per node / (%s/s read, %s/s write): a node's disk is shared by its\n"
      "                GPUs; parameter reads run ahead of their pass (hidden with overlap_comm like the\n"
      "                gathers); the optimizer's swap and the parameter writes add to the step\n",
      c.gpus_per_node, size_text(c.nvme_read_bytes_per_s).c_str(),
      size_text(c.nvme_write_bytes_per_s).c_str());
  host_model(out, plan);
  pipeline_model(out, plan);

  out << "  memory      planned for a GPU: activations in the compute dtype (2 bytes per element with\n";
  out << "                fp16/bf16; the CPU backend keeps fp32); model states by ZeRO's formulas; buffers\n";
  out << "                as the engine's arenas hold them in a dry run (its layer loop widens gathered\n";
  out << "                units to fp32 on every backend today)\n";
}

void timing(std::ostream& out, const Plan& plan) {
  timing_table(out, plan);
  timing_model(out, plan);
}

// "hpZ secondary" -> "hpz_secondary": JSON keys in the metrics file's style.
std::string key_of(const std::string& state) {
  std::string key;
  for (char ch : state) key += ch == ' ' ? '_' : char(std::tolower(static_cast<unsigned char>(ch)));
  return key;
}

nlohmann::json memory_json(const PlanMemory& m, double gpu_memory) {
  nlohmann::json j;
  for (const PlanMemoryLine& line : m.states) j[key_of(line.state)] = line.bytes;
  for (const PlanMemoryLine& line : m.buffers) j["buffer_parts"][key_of(line.state)] = line.bytes;
  j["activations_without_checkpointing"] = m.activations_full;
  j["activations_with_checkpointing"] = m.activations_checkpointed;
  j["activations_with_selective_recomputation"] = m.activations_selective;
  j["activations_paper"] = m.activations_paper;
  j["activations_paper_without_checkpointing"] = m.activations_paper_full;
  j["activations_paper_with_checkpointing"] = m.activations_paper_checkpointed;
  j["activations_paper_with_selective_recomputation"] = m.activations_paper_selective;
  j["model_states"] = m.model_states;
  j["total"] = m.total;
  j["fits"] = m.tiers.device <= gpu_memory;
  j["margin"] = gpu_memory - m.tiers.device;
  j["tiers"] = {{"device", m.tiers.device}, {"cpu", m.tiers.cpu}, {"nvme", m.tiers.nvme}};
  j["nvme_bytes_per_step"] = {{"read", m.offload.nvme_read}, {"written", m.offload.nvme_written}};
  return j;
}

nlohmann::json sweep_json(const Plan& plan) {
  nlohmann::json rows = nlohmann::json::array();
  for (const PlanTensorRow& r : plan.tensor_sweep) {
    nlohmann::json jr = {{"t", r.t},
                         {"d", r.d},
                         {"sequence_parallel", r.sequence_parallel},
                         {"hpz", r.hpz},
                         {"global_batch", r.global_batch},
                         {"model_states", r.model_states},
                         {"activations", r.activations},
                         {"activations_paper", r.activations_paper},
                         {"memory", r.memory},
                         {"fits", r.fits},
                         {"tensor_parallel_bytes", r.tensor_bytes},
                         {"zero_bytes", {{"intra", r.zero_intra}, {"inter", r.zero_inter}}},
                         {"step_s", r.step},
                         {"tokens_per_s", r.tokens_per_s}};
    if (!r.problem.empty()) jr["problem"] = r.problem;
    rows.push_back(jr);
  }
  return rows;
}

// p > 1: the split, each stage's memory and op times (the configured variant), the bubble.
nlohmann::json pipeline_json(const Plan& plan) {
  nlohmann::json stages = nlohmann::json::array();
  for (const PlanStage& r : plan.stages) {
    stages.push_back({{"stage", r.stage},
                      {"split", r.split},
                      {"layers", r.layers},
                      {"flops_share", r.flops_share},
                      {"in_flight", r.in_flight},
                      {"model_states", r.model_states},
                      {"activations", r.activations},
                      {"memory", r.memory},
                      {"forward_op_s", r.forward_op},
                      {"backward_op_s", r.backward_op}});
  }
  const PlanVariant& v = plan.variants[plan.configured];
  return {{"stages", plan.pipeline.stages},
          {"virtual_stages", plan.virtual_stages},
          {"micro_batches", plan.accumulation_steps},
          {"schedule", plan.virtual_stages > 1 ? "interleaved" : "1f1b"},
          {"busiest_stage", v.busiest_stage},
          {"bubble_formula", plan.bubble_formula},
          {"bubble_simulated", v.timing.bubble},
          {"per_stage", stages}};
}

}  // namespace

// A variant's predicted times, seconds (PlanTiming's fields).
nlohmann::json time_json(const PlanTiming& t) {
  return {{"compute_forward", t.compute_forward},
          {"compute_backward", t.compute_backward},
          {"param_gather_fwd", t.comm[0]},
          {"param_gather_bwd", t.comm[1]},
          {"grad_reduce", t.comm[2]},
          {"nvme_read", t.nvme_read},
          {"nvme_write", t.nvme_write},
          {"tensor_forward", t.tensor_forward},
          {"tensor_backward", t.tensor_backward},
          {"host_forward", t.host_forward},
          {"host_backward", t.host_backward},
          {"optimizer", t.optimizer},
          {"latency", t.latency},
          {"exposed", t.exposed},
          {"ahead", t.ahead},
          {"step", t.step}};
}

// One variant: its ZeRO settings, bytes by phase, times, memory (p > 1: the pipeline's parts too).
nlohmann::json variant_json(const Plan& plan, const PlanVariant& v) {
  const PlanOptions& c = plan.cluster;
  nlohmann::json jv = {{"name", v.name}, {"configured", v.configured}};
  jv["zero"] = {{"stage", v.zero.stage},
                {"qwz", v.zero.quantized_weights},
                {"hpz", v.zero.hpz_partition_size},
                {"qgz", v.zero.quantized_gradients},
                {"tile_factor", v.zero.tile_factor}};
  if (!v.problem.empty()) jv["problem"] = v.problem;
  for (Phase p : kPhases) {
    jv["bytes"][comm::phase_name(p)] = {{"intra", v.traffic.at(p, Link::kIntraNode)},
                                        {"inter", v.traffic.at(p, Link::kInterNode)}};
  }
  jv["time_s"] = time_json(v.timing);
  if (plan.pipeline.stages > 1) {
    jv["bytes"]["pp_p2p"] = {{"intra", v.traffic.at(Phase::kPpP2p, Link::kIntraNode)},
                             {"inter", v.traffic.at(Phase::kPpP2p, Link::kInterNode)}};
    jv["busiest_stage"] = v.busiest_stage;
    jv["time_s"].update({{"pipeline", v.timing.pipeline},
                         {"bubble", v.timing.bubble},
                         {"forward_op", v.timing.forward_op},
                         {"backward_op", v.timing.backward_op},
                         {"p2p_message", v.timing.p2p},
                         {"tied_embedding", v.timing.tied_embedding}});
  }
  jv["tokens_per_s"] = v.timing.tokens_per_s;
  jv["memory_total"] = v.memory.total;
  jv["fits"] = v.memory.tiers.device <= c.gpu_memory_bytes;
  jv["memory_tiers"] = {
      {"device", v.memory.tiers.device}, {"cpu", v.memory.tiers.cpu}, {"nvme", v.memory.tiers.nvme}};
  return jv;
}

std::string plan_json(const Plan& plan) {
  const GPTConfig& m = plan.model;
  const PlanOptions& c = plan.cluster;
  nlohmann::json j;
  j["model"] = {{"layers", m.num_layers},
                {"hidden", m.hidden},
                {"heads", m.heads},
                {"seq_len", m.seq_len},
                {"vocab", m.vocab},
                {"padded_vocab", m.padded_vocab()},
                {"max_positions", m.max_positions},
                {"params", plan.params},
                {"params_for_flops", plan.params_for_flops},
                {"padded_params", plan.padded_params},
                {"flops_per_token", plan.flops_per_token}};
  j["cluster"] = {{"nodes", c.nodes},
                  {"gpus_per_node", c.gpus_per_node},
                  {"world", plan.world},
                  {"gpu_memory_bytes", c.gpu_memory_bytes},
                  {"intra_node_bytes_per_s", c.intra_node_bytes_per_s},
                  {"inter_node_bytes_per_s", c.inter_node_bytes_per_s},
                  {"gpu_tflops", c.gpu_tflops},
                  {"nvme_read_bytes_per_s", c.nvme_read_bytes_per_s},
                  {"nvme_write_bytes_per_s", c.nvme_write_bytes_per_s}};
  j["batch"] = {{"micro_batch", plan.micro_batch},
                {"accumulation_steps", plan.accumulation_steps},
                {"global_batch", plan.global_batch},
                {"tokens_per_step", plan.global_batch * m.seq_len}};
  j["parallelism"] = {{"tensor_parallel", plan.tensor_parallel},
                      {"data_parallel", plan.data_parallel},
                      {"sequence_parallel", plan.sequence_parallel},
                      {"recompute", plan.variants[plan.configured].zero.recompute.describe()},
                      {"distribute_saved_activations", plan.distribute_saved_activations}};
  if (plan.pipeline.stages > 1) {
    j["parallelism"]["pipeline_parallel"] = plan.pipeline.stages;
    j["parallelism"]["virtual_stages"] = plan.virtual_stages;
    j["pipeline"] = pipeline_json(plan);
  }
  for (Phase p : {Phase::kTpFwd, Phase::kTpBwd, Phase::kActGather}) {
    j["tensor_parallel_bytes"][comm::phase_name(p)] = {
        {"intra", plan.tensor_traffic.at(p, Link::kIntraNode)},
        {"inter", plan.tensor_traffic.at(p, Link::kInterNode)}};
  }
  j["tensor_parallel_sweep"] = sweep_json(plan);
  j["configured"] = plan.variants[plan.configured].name;
  const PlanVariant& configured = plan.variants[plan.configured];
  // A configuration the engine refuses has no memory to count: its problem says why.
  j["memory"] = configured.problem.empty() ? memory_json(configured.memory, c.gpu_memory_bytes)
                                           : nlohmann::json{{"problem", configured.problem}};
  for (const PlanVariant& v : plan.variants) j["variants"].push_back(variant_json(plan, v));
  j["notes"] = plan.notes;
  return nlohmann::json{{"plan", j}}.dump();
}

std::string plan_report(const TrainOptions& options) {
  const Plan plan = make_plan(options);
  const PlanVariant& configured = plan.variants[plan.configured];
  std::ostringstream out;
  out << "gpt_train --plan: " << plan.cluster.nodes << " x " << plan.cluster.gpus_per_node
      << " GPUs; nothing is trained and no model memory is allocated\n\n";
  configuration(out, plan, configured);
  memory(out, plan, configured);
  pipeline_stages(out, plan);
  traffic(out, plan);
  tensor_traffic(out, plan);
  timing(out, plan);
  sweep(out, plan);
  for (const std::string& note : plan.notes) out << "note: " << note << "\n";
  out << "\n" << plan_json(plan) << "\n";
  return out.str();
}

}  // namespace gpt
