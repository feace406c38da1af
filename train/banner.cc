// gpt_train's start-up banner and memory reports; see banner.h.
#include "train/banner.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "kernels/cpu/threads.h"
#include "model/pipeline.h"
#include "tensor/arena.h"
#include "train/planner.h"
#include "zero/context.h"
#include "zero/qgz.h"
#include "zero/tensor_parallel_traffic.h"
#include "zero/traffic_model.h"

namespace gpt {
namespace {

// "3.21 GiB, 3.20 GiB": one size per rank.
std::string peaks_text(const std::vector<double>& peaks) {
  std::string text;
  for (size_t r = 0; r < peaks.size(); ++r) text += (r ? ", " : "") + format_bytes(size_t(peaks[r]));
  return text;
}

// The model, the world and its parallelism, the batch arithmetic, the optimizer and the memory savers.
// The pipeline's split: each stage's layers and share of the FLOPs, and the speedup over one stage that the
// split and the bubble allow: FLOP balance x (1 - bubble), the bubble (p - 1) / (v m + p - 1) of 1F1B (v = 1)
// or the interleaved schedule.
void print_pipeline(const TrainOptions& o, const ParallelGroups& groups) {
  const int p = groups.pipeline_size(), m = o.accumulation_steps, v = o.pipeline.virtual_stages(o.model);
  const double total = o.model.model_flops_per_token();
  double busiest = 0;
  std::printf(
      "  pipeline parallelism p = %d (%s, %d micro-batches per step, ranks ordered tensor, data, "
      "pipeline):",
      p, v == 1 ? "1F1B" : ("interleaved, " + std::to_string(v) + " chunks a stage").c_str(), m);
  for (int s = 0; s < p; ++s) {
    double flops = 0;
    std::string what;
    for (const PipelineChunk& c : stage_chunks(o.model, o.pipeline, s)) {
      flops += chunk_flops_per_token(o.model, c);
      what += std::string(what.empty() ? "" : ", ") + (c.embedding ? "embedding + " : "") + "layers " +
              std::to_string(c.first_layer) + "-" + std::to_string(c.end_layer - 1) +
              (c.head ? " + head" : "");
    }
    busiest = std::max(busiest, flops);
    std::printf("%s stage %d %s (%.0f%%)", s == 0 ? "" : ";", s, what.c_str(), 100.0 * flops / total);
  }
  const double busy_share = 1.0 - double(p - 1) / (double(v) * m + p - 1);
  std::printf("; ideal speedup %.2fx (FLOP balance %.2f x (1 - bubble) %.3f)\n", total / busiest * busy_share,
              total / busiest, busy_share);
}

void print_setup(const TrainOptions& o, const ParallelGroups& groups, const ZeroEngine& engine,
                 const BannerFacts& facts) {
  const comm::Communicator& world = groups.world();
  const GPTConfig& m = o.model;
  std::printf(
      "gpt_train: GPT-2 %d layers, hidden %d, %d heads, seq %d, vocab %d (padded %d): %.2fM parameters\n",
      m.num_layers, m.hidden, m.heads, m.seq_len, m.vocab, m.padded_vocab(), engine.table().total / 1e6);
  std::printf("  world %d ranks (%s), ZeRO stage %d, %s, overlap_comm %s, reduce_bucket_size %lld\n",
              world.size(), world.topology().describe().c_str(), o.zero.stage,
              precision_name(o.zero.precision), o.zero.overlap_comm ? "on" : "off",
              static_cast<long long>(o.zero.reduce_bucket_size));
  if (groups.pipeline_size() > 1) print_pipeline(o, groups);
  if (groups.tensor_size() > 1) {
    std::printf(
        "  tensor parallelism t = %d (consecutive ranks) x data parallelism d = %d; sequence parallelism "
        "%s; ZeRO shards each rank's tensor-parallel slice over its data-parallel group\n",
        groups.tensor_size(), groups.data().size(), o.zero.sequence_parallel ? "on" : "off");
  }
  std::printf(
      "  batch: micro %d x accumulation %d x %d data-parallel ranks = global %lld sequences (%lld tokens); "
      "%lld training windows%s\n",
      o.micro_batch, o.accumulation_steps, groups.data().size(), static_cast<long long>(o.global_batch),
      static_cast<long long>(o.global_batch * m.seq_len), static_cast<long long>(facts.loader->num_windows()),
      facts.has_validation ? "" : ", no validation data");
  std::printf("  optimizer %s (betas %g, %g, eps %g, weight decay %g), %s; clip %g; %d steps\n",
              o.zero.adam.decoupled ? "AdamW" : "Adam+L2", o.zero.adam.beta1, o.zero.adam.beta2,
              o.zero.adam.eps, o.zero.adam.weight_decay, o.schedule.describe().c_str(),
              o.zero.gradient_clipping, o.train_iters);
  std::printf("  dropout hidden %g, attention %g; activation recomputation %s; %d threads per rank\n",
              o.zero.hidden_dropout, o.zero.attention_dropout, o.zero.recompute.describe().c_str(),
              cpu::num_threads());
  if (o.zero.tile_factor > 1) {
    std::printf("  memory-centric tiling: %d tiles per block matrix, %d gather units per block\n",
                o.zero.tile_factor, engine.table().block_units(0).count());
  }
  if (o.zero.stage == 3) {
    const ZeroConfig& z = o.zero;
    std::printf(
        "  ZeRO++: qwZ %s, hpZ %s, qgZ %s\n",
        z.quantized_weights ? ("on (int8, block " + std::to_string(z.weight_block) + ")").c_str() : "off",
        z.hpz_partition_size > 1 ? ("on (h = " + std::to_string(z.hpz_partition_size) + ")").c_str() : "off",
        z.quantized_gradients ? ("on (" + describe_qgz(z) + ")").c_str() : "off");
  }
}

// The bytes a step should move by phase and link, from the closed forms.
void print_expected_traffic(const TrainOptions& o, const ParallelGroups& groups, const ZeroEngine& engine) {
  TrafficModelInput model_input;
  model_input.partition = &engine.partition();
  model_input.zero = o.zero;
  model_input.ranks_per_node = groups.data_topology().ranks_per_node;
  model_input.accumulation_steps = o.accumulation_steps;
  const comm::TrafficCounts expected = expected_step_traffic(model_input);
  // One data-parallel group's closed forms; the t groups move the same bytes each.
  const double t = groups.tensor_size();
  std::printf(groups.pipeline_size() > 1
                  ? "  expected bytes per step (closed forms; ZeRO's phases: this stage's ranks):"
                  : "  expected bytes per step (closed forms, all ranks):");
  for (comm::Phase phase :
       {comm::Phase::kParamGatherFwd, comm::Phase::kParamGatherBwd, comm::Phase::kGradReduce}) {
    std::printf(" %s intra %s inter %s;", comm::phase_name(phase),
                bytes_text(t * double(expected.at(phase, comm::Link::kIntraNode))).c_str(),
                bytes_text(t * double(expected.at(phase, comm::Link::kInterNode))).c_str());
  }
  if (groups.tensor_size() > 1) {  // the layers' own collectives, inside the nodes
    const comm::TrafficCounts layers =
        expected_tensor_parallel_traffic({o.model, o.micro_batch, o.accumulation_steps, groups.tensor_size(),
                                          groups.data().size(), o.zero.sequence_parallel, o.zero.recompute,
                                          o.zero.distribute_saved_activations, engine.compute_dtype()});
    for (comm::Phase phase : {comm::Phase::kTpFwd, comm::Phase::kTpBwd, comm::Phase::kActGather})
      std::printf(" %s intra %s;", comm::phase_name(phase),
                  bytes_text(double(layers.at(phase, comm::Link::kIntraNode))).c_str());
  }
  if (groups.pipeline_size() > 1) {  // activations and their gradients between the stages (every stage's)
    const comm::Topology& world = groups.world().topology();
    const comm::TrafficCounts p2p =
        pipeline_p2p_traffic(o.model, o.pipeline, world.num_nodes(), world.ranks_per_node,
                             groups.tensor_size(), o.zero.sequence_parallel, o.micro_batch,
                             o.accumulation_steps, int(dtype_size(engine.compute_dtype())));
    std::printf(" pp_p2p intra %s inter %s;",
                bytes_text(double(p2p.at(comm::Phase::kPpP2p, comm::Link::kIntraNode))).c_str(),
                bytes_text(double(p2p.at(comm::Phase::kPpP2p, comm::Link::kInterNode))).c_str());
  }
  std::printf("\n");
}

}  // namespace

std::string bytes_text(double b) {
  char s[32];
  std::snprintf(s, sizeof s,
                b >= 1e9   ? "%.2f GB"
                : b >= 1e6 ? "%.2f MB"
                           : "%.0f B",
                b >= 1e9   ? b / 1e9
                : b >= 1e6 ? b / 1e6
                           : b);
  return s;
}

void print_banner(const TrainOptions& o, const ParallelGroups& groups, const ZeroEngine& engine,
                  const BannerFacts& facts) {
  print_setup(o, groups, engine, facts);
  print_expected_traffic(o, groups, engine);
  if (!o.vocab_file.empty() || !o.merge_file.empty()) {
    std::printf(
        "  note: --vocab-file/--merge-file accepted: gpt_train reads token shards (gpt_prepare and "
        "gpt_generate use the tokenizer)\n");
  }
  for (const std::string& note : o.notes) std::printf("  note: %s\n", note.c_str());
  for (const std::string& note : engine.notes()) std::printf("  note: %s\n", note.c_str());
  std::fputs(engine.memory_table().c_str(), stdout);
  std::printf("  device %s, communication over %s\n", facts.device.c_str(), facts.transport.c_str());
  std::printf("%s\n", facts.peak.banner_line().c_str());
  const MemoryVerdict& memory = facts.memory;
  std::printf(
      "  memory guard: each rank needs up to %s at its peak; this one may use %s (%s %s shared by %d "
      "rank%s on its machine)\n",
      format_bytes(size_t(memory.need)).c_str(), format_bytes(size_t(memory.budget)).c_str(),
      memory.source.c_str(), format_bytes(size_t(memory.machine_memory)).c_str(), memory.ranks_on_machine,
      memory.ranks_on_machine == 1 ? "" : "s");
  if (!facts.validation_note.empty()) std::printf("  note: %s\n", facts.validation_note.c_str());
  std::fflush(stdout);
}

// The engine's table completed with what no arena holds, counted as the guard counts it (the MPI ring's
// staging, the engine's start-up copy, checkpoint copies, the bound on freed blocks kept for reuse) and the
// process baseline the guard measured: its total is the predicted peak. Gather and bucket buffers and hpZ
// secondaries exist only once a step has run.
void print_first_step_memory(const TrainOptions& o, const ZeroEngine& engine, int data_parallel_size,
                             const comm::Topology& host, const MemoryVerdict& memory,
                             const std::vector<double>& peaks, size_t device_peak_bytes) {
  const MemoryNeed predicted = rank_memory_need(o, host.num_nodes(), host.ranks_per_node, memory.baseline);
  std::printf(
      "after the first step, memory per rank (ZeRO stage %d, %s, W = %d; arena peaks, then what the "
      "arenas do not hold)\n",
      o.zero.stage, precision_name(o.zero.precision), data_parallel_size);
  double total = 0;
  auto row = [&](const std::string& state, double bytes, const std::string& note) {
    total += bytes;
    std::printf("  %-22s %12s%s%s\n", state.c_str(), format_bytes(size_t(bytes)).c_str(),
                note.empty() ? "" : "   ", note.c_str());
  };
  for (const ZeroEngine::MemoryLine& line : engine.memory()) {
    row(line.state, double(line.bytes),
        line.formula.empty()
            ? ""
            : "ZeRO formula " + line.formula + " = " + format_bytes(size_t(line.formula_bytes)));
  }
  for (const char* state : {"communication staging", "start-up copy", "checkpoint copy", "kept host blocks",
                            "process baseline"}) {
    if (const double bytes = predicted.of(state); bytes > 0) {
      row(state, bytes, std::string(state) == "process baseline" ? "measured before the engine" : "counted");
    }
  }
  const double largest = *std::max_element(peaks.begin(), peaks.end());
  std::printf("  %-22s %12s   the memory guard predicted %s\n", "total", format_bytes(size_t(total)).c_str(),
              format_bytes(size_t(predicted.total)).c_str());
  std::printf("  %-22s %12s   the largest of the ranks' (%s); the total is %+.1f%% of it\n",
              "peak RSS (VmHWM)", format_bytes(size_t(largest)).c_str(), peaks_text(peaks).c_str(),
              100 * (total / largest - 1));
  if (device_peak_bytes > 0)
    std::printf("  device peak      %s (the most GPU memory rank 0 has held at once)\n",
                bytes_text(double(device_peak_bytes)).c_str());
}

void print_peak_rss(const std::vector<double>& peaks, const MemoryVerdict& memory) {
  std::printf("peak RSS (VmHWM) per rank: %s; the memory guard predicted %s\n", peaks_text(peaks).c_str(),
              format_bytes(size_t(memory.need)).c_str());
}

}  // namespace gpt
