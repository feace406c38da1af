// gpt_train: trains GPT-2 with the ZeRO engine, one process per rank under mpiexec (or a single process
// without it). Reads Megatron-style flags and a DeepSpeed-style JSON config (train/options.h), prints a
// start-up banner with the memory table, one line per step, and writes the metrics file.
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "comm/mpi_communicator.h"
#include "data/loader.h"
#include "data/shard.h"
#include "kernels/cpu/threads.h"
#include "train/batches.h"
#include "train/flags.h"
#include "train/metrics.h"
#include "train/options.h"
#include "zero/engine.h"
#include "zero/traffic_model.h"

namespace gpt {
namespace {

void print_banner(const TrainOptions& o, const comm::Communicator& world, const ZeroEngine& engine,
                  const data::TrainLoader& loader) {
  const GPTConfig& m = o.model;
  std::printf(
      "gpt_train: GPT-2 %d layers, hidden %d, %d heads, seq %d, vocab %d (padded %d): %.2fM parameters\n",
      m.num_layers, m.hidden, m.heads, m.seq_len, m.vocab, m.padded_vocab(), engine.table().total / 1e6);
  std::printf("  world %d ranks (%s), ZeRO stage %d, %s, overlap_comm %s, reduce_bucket_size %lld\n",
              world.size(), world.topology().describe().c_str(), o.zero.stage,
              precision_name(o.zero.precision), o.zero.overlap_comm ? "on" : "off",
              static_cast<long long>(o.zero.reduce_bucket_size));
  std::printf(
      "  batch: micro %d x accumulation %d x %d ranks = global %lld sequences (%lld tokens); %lld "
      "training windows\n",
      o.micro_batch, o.accumulation_steps, world.size(), static_cast<long long>(o.global_batch),
      static_cast<long long>(o.global_batch * m.seq_len), static_cast<long long>(loader.num_windows()));
  std::printf("  dropout hidden %g, attention %g; activation checkpointing %s; %d threads per rank\n",
              o.zero.hidden_dropout, o.zero.attention_dropout, o.zero.checkpoint_activations ? "on" : "off",
              cpu::num_threads());
  if (o.zero.stage == 3) {
    const ZeroConfig& z = o.zero;
    std::printf(
        "  ZeRO++: qwZ %s, hpZ %s, qgZ %s\n",
        z.quantized_weights ? ("on (int8, block " + std::to_string(z.weight_block) + ")").c_str() : "off",
        z.hpz_partition_size > 1 ? ("on (h = " + std::to_string(z.hpz_partition_size) + ")").c_str() : "off",
        z.quantized_gradients ? ("on (int4, block " + std::to_string(z.gradient_block) + ")").c_str()
                              : "off");
  }
  TrafficModelInput model_input;
  model_input.partition = &engine.partition();
  model_input.zero = o.zero;
  model_input.ranks_per_node = world.topology().ranks_per_node;
  model_input.accumulation_steps = o.accumulation_steps;
  const comm::TrafficCounts expected = expected_step_traffic(model_input);
  std::printf("  expected bytes per step (closed forms, all ranks):");
  for (comm::Phase phase :
       {comm::Phase::kParamGatherFwd, comm::Phase::kParamGatherBwd, comm::Phase::kGradReduce}) {
    std::printf(" %s intra %.2f MB inter %.2f MB;", comm::phase_name(phase),
                expected.at(phase, comm::Link::kIntraNode) / 1e6,
                expected.at(phase, comm::Link::kInterNode) / 1e6);
  }
  std::printf("\n");
  for (const std::string& note : o.notes) std::printf("  note: %s\n", note.c_str());
  for (const std::string& note : engine.notes()) std::printf("  note: %s\n", note.c_str());
  std::fputs(engine.memory_table().c_str(), stdout);
  std::fflush(stdout);
}

int train(const TrainOptions& o, comm::Communicator& world) {
  const bool rank0 = world.rank() == 0;
  if (o.threads > 0) cpu::set_num_threads(o.threads);
  if (std::string problem = ZeroEngine::check_zeropp(o.zero, world.topology()); !problem.empty()) {
    throw UsageError(problem);
  }
  const GPTConfig& config = o.model;
  const int B = o.micro_batch, T = config.seq_len;

  TrainBatches batches(o.data_path, config.vocab, T, B, o.accumulation_steps, world,
                       static_cast<uint64_t>(o.seed));
  ZeroEngine engine(config, o.zero, B, world, static_cast<uint64_t>(o.seed));
  std::unique_ptr<MetricsFile> metrics;
  if (rank0 && !o.metrics_file.empty()) metrics = std::make_unique<MetricsFile>(o.metrics_file);
  const double sgemm_gflops = measure_sgemm_gflops(512);
  if (rank0) print_banner(o, world, engine, batches.loader());

  StepTraffic traffic(world);
  int64_t skipped_total = 0;
  for (int step = 1; step <= o.train_iters; ++step) {
    const auto start = std::chrono::steady_clock::now();
    const ZeroEngine::StepResult r = engine.train_step(batches.at(step - 1), o.lr);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    StepMetrics s;
    s.step = step;
    s.loss = r.loss;
    s.lr = o.lr;
    s.loss_scale = r.loss_scale;
    s.grad_norm = r.grad_norm;
    s.skipped = r.skipped;
    s.skipped_total = skipped_total += r.skipped ? 1 : 0;
    s.ms = ms;
    s.tokens_per_s = double(o.global_batch) * T / (ms / 1000.0);
    s.mfu = config.model_flops_per_token() * s.tokens_per_s / world.size() / (sgemm_gflops * 1e9);
    s.traffic = traffic.collect();
    if (!rank0) continue;
    std::printf(
        "step %5d/%d | loss %.4f | lr %.3g | scale %g | grad norm %s | skipped %lld | %.1f ms | %.0f "
        "tokens/s | MFU %.1f%% | intra %.1f MB | inter %.1f MB\n",
        step, o.train_iters, s.loss, s.lr, s.loss_scale,
        r.skipped ? "overflow" : std::to_string(s.grad_norm).substr(0, 6).c_str(),
        static_cast<long long>(skipped_total), ms, s.tokens_per_s, 100 * s.mfu,
        s.traffic.total(comm::Link::kIntraNode) / 1e6, s.traffic.total(comm::Link::kInterNode) / 1e6);
    std::fflush(stdout);
    if (metrics) metrics->write(s);
    if (step == 1) {
      // Gather buffers, bucket buffers and hpZ secondaries exist only once a step has run.
      std::printf("after step 1, %s", engine.memory_table().c_str());
    }
  }
  return 0;
}

}  // namespace
}  // namespace gpt

int main(int argc, char** argv) {
  gpt::comm::MpiSession session(argc, argv);
  // Every rank validates the same inputs, so a mistake stops every rank with the same line (no hang).
  auto fail = [&](const char* what) {
    std::fprintf(stderr, "gpt_train: %s\n", what);
    return 2;
  };
  try {
    gpt::TrainOptions options;
    if (!gpt::parse_train_options(argc, argv, session.world_size(), &options)) return 0;
    gpt::comm::MpiOptions mpi_options;
    mpi_options.ranks_per_node = options.ranks_per_node;
    std::unique_ptr<gpt::comm::Communicator> world = session.world(mpi_options);
    return gpt::train(options, *world);
  } catch (const gpt::UsageError& e) {
    return fail(e.what());
  } catch (const gpt::data::DataError& e) {
    return fail(e.what());
  } catch (const gpt::comm::TopologyError& e) {
    return fail(e.what());
  }
}
