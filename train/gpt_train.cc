// gpt_train: trains GPT-2 with the ZeRO engine, one process per rank under mpiexec (or a single process
// without it). Megatron-style flags and a DeepSpeed-style JSON config (train/options.h); a start-up banner
// with the memory table and the expected traffic; a progress line every --log-interval steps; validation; a
// JSON Lines metrics file; checkpoints that resume exactly (also at another world size); --plan for a
// cluster.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "comm/mpi_communicator.h"
#include "data/loader.h"
#include "data/shard.h"
#include "kernels/cpu/threads.h"
#include "model/llmc_format.h"
#include "train/batches.h"
#include "train/flags.h"
#include "train/metrics.h"
#include "train/options.h"
#include "train/planner.h"
#include "zero/checkpoint.h"
#include "zero/engine.h"
#include "zero/traffic_model.h"

namespace gpt {
namespace {

// The one piece of global state: a signal handler can only set a flag. The training loop sends it through the
// step's agreement all-reduce, so every rank stops (after a checkpoint) at the same step.
volatile std::sig_atomic_t stop_signal = 0;
void on_stop_signal(int) {
  stop_signal = 1;
}

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

std::string duration_text(double seconds) {
  const long s = long(seconds + 0.5);
  char text[32];
  std::snprintf(text, sizeof text, "%02ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  return text;
}

void print_banner(const TrainOptions& o, const comm::Communicator& world, const ZeroEngine& engine,
                  const data::TrainLoader& loader, bool has_validation) {
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
      "training windows%s\n",
      o.micro_batch, o.accumulation_steps, world.size(), static_cast<long long>(o.global_batch),
      static_cast<long long>(o.global_batch * m.seq_len), static_cast<long long>(loader.num_windows()),
      has_validation ? "" : ", no validation data");
  std::printf("  optimizer %s (betas %g, %g, eps %g, weight decay %g), %s; clip %g; %d steps\n",
              o.zero.adam.decoupled ? "AdamW" : "Adam+L2", o.zero.adam.beta1, o.zero.adam.beta2,
              o.zero.adam.eps, o.zero.adam.weight_decay, o.schedule.describe().c_str(),
              o.zero.gradient_clipping, o.train_iters);
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
    std::printf(" %s intra %s inter %s;", comm::phase_name(phase),
                bytes_text(double(expected.at(phase, comm::Link::kIntraNode))).c_str(),
                bytes_text(double(expected.at(phase, comm::Link::kInterNode))).c_str());
  }
  std::printf("\n");
  if (!o.vocab_file.empty() || !o.merge_file.empty()) {
    std::printf(
        "  note: --vocab-file/--merge-file accepted: gpt_train reads token shards (gpt_prepare and "
        "gpt_generate use the tokenizer)\n");
  }
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
  const double train_share = o.split_train, valid_share = o.split_valid;
  const bool split_data = o.valid_data_path.empty();
  TrainBatches batches(o.data_path, config.vocab, T, B, o.accumulation_steps, world, uint64_t(o.seed), 0.0,
                       split_data ? train_share : 1.0);
  // Validation needs at least one batch of B sequences per rank; checked now, before any work can be lost.
  std::unique_ptr<data::ValidLoader> valid;
  std::string validation_note;
  if (!split_data) {
    valid = std::make_unique<data::ValidLoader>(data::expand_data_path(o.valid_data_path), config.vocab, T);
    if (valid->num_batches(B) < world.size()) {
      throw UsageError("--valid-data-path " + o.valid_data_path + " holds " +
                       std::to_string(valid->num_windows()) + " windows of " + std::to_string(T + 1) +
                       " tokens, fewer than one batch of " + std::to_string(B) + " per rank for " +
                       std::to_string(world.size()) +
                       " ranks; give more validation text or a smaller --micro-batch-size");
    }
  } else if (valid_share > 0) {
    try {
      valid = std::make_unique<data::ValidLoader>(data::expand_data_path(o.data_path), config.vocab, T,
                                                  train_share, train_share + valid_share);
    } catch (const data::DataError&) {
      valid.reset();  // the split leaves no window: said below
    }
    if (!valid || valid->num_batches(B) < world.size()) {
      validation_note = "validation off: --split " + o.split + " leaves " +
                        std::to_string(valid ? valid->num_windows() : 0) +
                        " validation windows, fewer than " + std::to_string(int64_t(B) * world.size()) +
                        " (one batch per rank); give --valid-data-path or more data";
      valid.reset();
    }
  }

  ZeroEngine engine(config, o.zero, B, world, uint64_t(o.seed));
  int64_t iteration = 0, skipped_total = 0;
  if (!o.init_from.empty()) {
    std::vector<float> params;
    load_llmc_into_model_layout(o.init_from, config, params);
    engine.load_model_weights(params.data());
    if (rank0) std::printf("gpt_train: weights from %s\n", o.init_from.c_str());
  }
  if (!o.load.empty()) {
    const LoadedCheckpoint c = load_checkpoint(engine, world, o.load, o.finetune);
    if (!o.finetune) {
      if (c.position.global_batch != o.global_batch) {
        throw UsageError("--load " + c.path + " was trained with a global batch of " +
                         std::to_string(c.position.global_batch) + " sequences, this run has " +
                         std::to_string(o.global_batch) +
                         "; the data position is a stream offset, so set --global-batch-size " +
                         std::to_string(c.position.global_batch) + " (or use --finetune)");
      }
      iteration = c.position.iteration;
      skipped_total = c.position.skipped_total;
    }
    if (rank0) {
      std::printf("gpt_train: loaded %s (saved at %d ranks)%s\n", c.path.c_str(), c.saved_world_size,
                  o.finetune ? ", weights only (--finetune)"
                             : (", resuming after step " + std::to_string(iteration)).c_str());
    }
  }
  std::unique_ptr<MetricsFile> metrics;
  if (rank0 && !o.metrics_file.empty())
    metrics = std::make_unique<MetricsFile>(o.metrics_file, iteration > 0);
  const double sgemm_gflops = measure_sgemm_gflops(512);
  if (rank0) print_banner(o, world, engine, batches.loader(), valid != nullptr);
  if (rank0 && !validation_note.empty()) std::printf("  note: %s\n", validation_note.c_str());
  std::signal(SIGTERM, on_stop_signal);
  std::signal(SIGINT, on_stop_signal);

  auto save = [&](const char* why) {
    const TrainingPosition position{iteration, skipped_total, o.global_batch, uint64_t(o.seed)};
    const std::string path = save_checkpoint(engine, world, o.save, position, o.keep_checkpoints);
    if (rank0) std::printf("gpt_train: saved %s (%s)\n", path.c_str(), why);
    std::fflush(stdout);
  };
  auto evaluate = [&]() {
    const double loss = validation_loss(engine, *valid, B, T, o.eval_iters, world);
    if (rank0) {
      std::printf("validation after step %lld | val loss %.4f | ppl %.2f\n",
                  static_cast<long long>(iteration), loss, std::exp(loss));
      if (metrics)
        metrics->write_raw("{\"step\": " + std::to_string(iteration) +
                           ", \"val_loss\": " + to_json_number(loss) + "}");
    }
    return loss;
  };

  StepTraffic traffic(world);
  const auto run_start = std::chrono::steady_clock::now();
  const int64_t first_iteration = iteration;
  double interval_loss = 0, interval_ms = 0, last_val = -1;
  int interval_steps = 0;
  comm::TrafficCounts interval_traffic;
  while (iteration < o.train_iters) {
    const auto start = std::chrono::steady_clock::now();
    const double lr = o.schedule.at(engine.applied_steps());
    const ZeroEngine::StepResult r = engine.train_step(batches.at(iteration), lr, stop_signal != 0);
    ++iteration;  // the data position advances on skipped steps too
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    StepMetrics s;
    s.step = iteration;
    s.loss = r.loss;
    s.lr = lr;
    s.loss_scale = r.loss_scale;
    s.grad_norm = r.grad_norm;
    s.skipped = r.skipped;
    s.skipped_total = skipped_total += r.skipped ? 1 : 0;
    s.ms = ms;
    s.tokens_per_s = double(o.global_batch) * T / (ms / 1000.0);
    s.mfu = config.model_flops_per_token() * s.tokens_per_s / world.size() / (sgemm_gflops * 1e9);
    s.traffic = traffic.collect();
    if (metrics) metrics->write(s);
    interval_loss += r.loss, interval_ms += ms, ++interval_steps, interval_traffic += s.traffic;

    if (rank0 && iteration == first_iteration + 1) {
      // Gather and bucket buffers and hpZ secondaries exist only once a step has run.
      std::printf("after the first step, %s", engine.memory_table().c_str());
    }
    const bool last = iteration == o.train_iters;
    if (valid && (iteration % o.eval_interval == 0 || last)) last_val = evaluate();
    if (rank0 && (iteration % o.log_interval == 0 || last || r.stop)) {
      const double per_step = interval_ms / interval_steps;
      const double elapsed =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();
      const double eta = elapsed / double(iteration - first_iteration) * double(o.train_iters - iteration);
      std::string line = "step " +
                         std::string(5 - std::min<size_t>(5, std::to_string(iteration).size()), ' ') +
                         std::to_string(iteration) + "/" + std::to_string(o.train_iters);
      char rest[512];
      std::snprintf(
          rest, sizeof rest,
          " | loss %.4f%s | lr %.3e | scale %g | grad norm %s | skipped %lld | %.1f ms | %.0f tokens/s | "
          "MFU %.1f%% | intra %s | inter %s per step | ETA %s",
          interval_loss / interval_steps,
          last_val >= 0 ? (" | val loss " + std::to_string(last_val).substr(0, 6)).c_str() : "", lr,
          r.loss_scale, r.skipped ? "overflow" : std::to_string(r.grad_norm).substr(0, 6).c_str(),
          static_cast<long long>(skipped_total), per_step, double(o.global_batch) * T / (per_step / 1000),
          100 * s.mfu,
          bytes_text(double(interval_traffic.total(comm::Link::kIntraNode)) / interval_steps).c_str(),
          bytes_text(double(interval_traffic.total(comm::Link::kInterNode)) / interval_steps).c_str(),
          duration_text(eta).c_str());
      std::printf("%s%s\n", line.c_str(), rest);
      if (o.wall_clock_breakdown) {
        std::printf("  time (rank 0): forward %.1f ms, backward %.1f ms, step %.1f ms; waits %s\n",
                    r.forward_ms, r.backward_ms, r.optimizer_ms, s.traffic.describe().c_str());
      }
      std::fflush(stdout);
      interval_loss = interval_ms = 0, interval_steps = 0, interval_traffic = comm::TrafficCounts{};
    }
    const bool exit_now = r.stop || (o.exit_interval > 0 && iteration % o.exit_interval == 0);
    if (!o.save.empty() && ((o.save_interval > 0 && iteration % o.save_interval == 0) || last || exit_now)) {
      save(r.stop ? "stop signal" : last ? "end of training" : "interval");
    }
    if (exit_now) {
      if (rank0)
        std::printf("gpt_train: stopping after step %lld (%s)\n", static_cast<long long>(iteration),
                    r.stop ? "SIGTERM/SIGINT" : "--exit-interval");
      break;
    }
  }
  return 0;
}

}  // namespace
}  // namespace gpt

namespace {

int run(gpt::comm::MpiSession& session, int argc, char** argv) {
  // Every rank validates the same inputs, so a mistake stops every rank with the same line (no hang).
  auto fail = [&](const char* what) {
    std::fprintf(stderr, "gpt_train: %s\n", what);
    return 2;
  };
  try {
    gpt::TrainOptions options;
    if (!gpt::parse_train_options(argc, argv, session.world_size(), &options)) return 0;
    if (options.plan.enabled) {
      if (session.world_rank() == 0) std::fputs(gpt::plan_report(options).c_str(), stdout);
      return 0;
    }
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
  } catch (const gpt::CheckpointError& e) {
    return fail(e.what());
  } catch (const gpt::ModelFileError& e) {
    return fail(e.what());
  }
}

}  // namespace

int main(int argc, char** argv) {
  gpt::comm::MpiSession session(argc, argv);
  const int code = run(session, argc, argv);
  session.set_exit_code(code);  // for the finished-work marker (see MpiSession's destructor)
  return code;
}
