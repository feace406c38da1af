// gpt_train: trains GPT-2 with the ZeRO engine, one process per rank under mpiexec (or a single process
// without it). Megatron-style flags and a DeepSpeed-style JSON config (train/options.h); a start-up banner
// with the memory table and the expected traffic; a progress line every --log-interval steps; validation; a
// JSON Lines metrics file; checkpoints that resume exactly (also at another world size); --plan for a
// cluster. The banner and the memory reports are train/banner.h's; MFU's peak is train/peak_flops.h's.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "base/fault.h"
#include "base/main.h"
#include "comm/mpi_main.h"
#include "data/loader.h"
#include "data/shard.h"
#include "kernels/backend.h"
#include "kernels/cpu/threads.h"
#include "model/llmc_format.h"
#include "model/model_file.h"
#include "train/banner.h"
#include "train/batches.h"
#include "train/device_world.h"
#include "train/memory_guard.h"
#include "train/metrics.h"
#include "train/options.h"
#include "train/peak_flops.h"
#include "train/planner.h"
#include "zero/checkpoint.h"
#include "zero/context.h"
#include "zero/engine.h"
#include "zero/parallel_groups.h"

namespace gpt {
namespace {

// The one piece of global state: a signal handler can only set a flag (here the signal's number). The
// training loop sends it through the step's agreement all-reduce, so every rank stops (after a checkpoint) at
// the same step. SIGUSR1 is what a Slurm batch script forwards ahead of the time limit (sbatch
// --signal=B:USR1@120).
volatile std::sig_atomic_t stop_signal = 0;
void on_stop_signal(int signal) {
  stop_signal = signal;
}

const char* signal_name(int signal) {
  switch (signal) {
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    case SIGUSR1:
      return "SIGUSR1";
    default:
      return "a stop signal";
  }
}

// --exit-duration-in-mins counts from here, the program's start (Megatron's from the start of pretrain()), so
// that start-up and the checkpoint load count against the job's time too.
const std::chrono::steady_clock::time_point program_start = std::chrono::steady_clock::now();

double minutes_since_start() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - program_start).count() / 60;
}

std::string duration_text(double seconds) {
  const long s = long(seconds + 0.5);
  char text[32];
  std::snprintf(text, sizeof text, "%02ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  return text;
}

// Validation data: --valid-data-path, or the --split share of --data-path. Without enough windows for one
// batch per rank, --valid-data-path is a mistake (checked now, before any work can be lost) and a split turns
// validation off with a note.
struct Validation {
  std::unique_ptr<data::ValidLoader> loader;
  std::string note;
};

Validation make_validation(const TrainOptions& o, const comm::Communicator& data_parallel) {
  const int B = o.micro_batch, T = o.model.seq_len, W = data_parallel.size();
  Validation v;
  if (!o.valid_data_path.empty()) {
    v.loader =
        std::make_unique<data::ValidLoader>(data::expand_data_path(o.valid_data_path), o.model.vocab, T);
    if (v.loader->num_batches(B) < W) {
      throw UsageError("--valid-data-path " + o.valid_data_path + " holds " +
                       std::to_string(v.loader->num_windows()) + " windows of " + std::to_string(T + 1) +
                       " tokens, fewer than one batch of " + std::to_string(B) + " per rank for " +
                       std::to_string(W) +
                       " ranks; give more validation text or a smaller --micro-batch-size");
    }
  } else if (o.split_valid > 0) {
    try {
      v.loader = std::make_unique<data::ValidLoader>(data::expand_data_path(o.data_path), o.model.vocab, T,
                                                     o.split_train, o.split_train + o.split_valid);
    } catch (const data::DataError&) {
      v.loader.reset();  // the split leaves no window: said below
    }
    if (!v.loader || v.loader->num_batches(B) < W) {
      v.note = "validation off: --split " + o.split + " leaves " +
               std::to_string(v.loader ? v.loader->num_windows() : 0) + " validation windows, fewer than " +
               std::to_string(int64_t(B) * W) + " (one batch per rank); give --valid-data-path or more data";
      v.loader.reset();
    }
  }
  return v;
}

// The ZeRO++ settings against the topology, then the memory guard: the guard counts the engine's buffers by a
// dry run of the engine (zero/dry_run.h), which needs settings the engine accepts.
MemoryVerdict check_then_guard(const TrainOptions& o, comm::Communicator& host_world,
                               const comm::Topology& data_parallel) {
  if (std::string problem = first_problem(o.zero.problems(data_parallel)); !problem.empty()) {
    if (o.tensor_parallel > 1)
      problem += " (at --tensor-model-parallel-size " + std::to_string(o.tensor_parallel) +
                 ", ZeRO's ranks per node are the data-parallel ones: ranks per node / t)";
    throw UsageError(problem);
  }
  return check_memory(o, host_world);
}

// The dtype the GEMMs multiply in: the backend's compute dtype for the run's precision. A GPU's half layer
// loop (zero/context.h) hands its GEMMs fp16/bf16 tensors, and its fp32 GEMMs (the fused classifier's
// widened chunks) round their inputs to that dtype on the tensor cores (Ops::set_matmul_inputs, fp32
// accumulation); the CPU multiplies in the loop's dtype.
DType gemm_dtype(const TrainOptions& o, const Ops* backend) {
  return backend ? backend->compute_dtype(o.zero.precision) : loop_dtype(o.zero.precision);
}

// MFU's denominator (train/peak_flops.h): the datasheet peak of the dtype the GEMMs multiply in. The
// measurement runs only where no peak can be stated (an unknown clock or GPU).
PeakFlops mfu_peak(const TrainOptions& o, Ops* backend, int ranks_on_machine) {
  return rank_peak_flops(
      o.peak_tflops, backend_gpu(backend), gemm_dtype(o, backend), cpu::num_threads(), ranks_on_machine,
      [&] { return 1e9 * (backend ? measure_gemm_gflops(*backend, 2048) : measure_sgemm_gflops(512)); },
      backend ? "cuBLAS fp32 GEMM 2048^3" : "Eigen SGEMM 512^3");
}

// The sums behind one progress line: the steps since the previous line.
struct Interval {
  double loss = 0, ms = 0;
  int steps = 0;
  comm::TrafficCounts traffic;
};

// One training run: the engine, its data and outputs, and the position in the data stream (the step count
// is all the state a resume needs besides the engine's).
class Run {
 public:
  // groups: the world (MPI's or NCCL's) and its tensor- and data-parallel groups; backend: the device
  // seam's backend (null: the CPU's); transport: what the world runs on, for the banner; host_world: the MPI
  // world, for the memory guard and the peak RSS reports.
  Run(const TrainOptions& o, const ParallelGroups& groups, Ops* backend, const std::string& transport,
      comm::Communicator& host_world);
  void loop();
  void hang_if_asked(int64_t step) const;

 private:
  void start_from_model_file_or_checkpoint();
  StepMetrics measure(const ZeroEngine::StepResult& r, double lr, double ms);
  // What comes after step `step` (1-based) by the run's schedule; a stop signal adds to it. A step with
  // none of it is followed straight by the next, and the engine then sends that one's first gather from
  // this step's optimizer.
  struct AfterStep {
    bool last = false, evaluate = false, exit = false, save = false;  // exit: --exit-interval
    bool next_step_follows() const { return !last && !evaluate && !exit && !save; }
  };
  AfterStep scheduled_after(int64_t step) const;
  void after_step(const ZeroEngine::StepResult& r, const StepMetrics& s, const AfterStep& after,
                  bool& exit_now);
  void print_progress(const ZeroEngine::StepResult& r, const StepMetrics& s);
  double evaluate();
  void save(const char* why);
  bool stop_asked() const;
  bool past_exit_duration() const;
  std::string stop_reason() const;
  std::vector<double> peak_rss_of_ranks();
  void print_memory_after_first_step();

  const TrainOptions& o_;
  comm::Communicator& world_;
  comm::Communicator& data_parallel_;
  comm::Communicator& host_world_;
  Ops* const backend_;
  const bool rank0_;
  TrainBatches batches_;
  Validation valid_;
  MemoryVerdict memory_;  // the guard runs here: after the data, before the engine allocates anything
  const std::optional<ZeroEngine::Pipeline> pipeline_;  // this rank's stage and its channels (p > 1)
  ZeroEngine engine_;
  int64_t iteration_ = 0, skipped_total_ = 0, first_iteration_ = 0;
  std::unique_ptr<MetricsFile> metrics_;
  PeakFlops peak_;  // MFU's denominator
  double last_val_ = -1;
  std::chrono::steady_clock::time_point run_start_;
  Interval interval_;
};

Run::Run(const TrainOptions& o, const ParallelGroups& groups, Ops* backend, const std::string& transport,
         comm::Communicator& host_world)
    : o_(o),
      world_(groups.world()),
      data_parallel_(groups.data()),
      host_world_(host_world),
      backend_(backend),
      rank0_(world_.rank() == 0),
      batches_(o.data_path, o.model.vocab, o.model.seq_len, o.micro_batch, o.accumulation_steps,
               data_parallel_, uint64_t(o.seed), 0.0, o.valid_data_path.empty() ? o.split_train : 1.0),
      valid_(make_validation(o, data_parallel_)),
      memory_(check_then_guard(o, host_world, groups.data_topology())),
      pipeline_(pipeline_stage(o.pipeline, groups)),
      engine_(o.model, o.zero, o.micro_batch, data_parallel_, uint64_t(o.seed), backend, groups.tensor(),
              pipeline_ ? &*pipeline_ : nullptr) {
  start_from_model_file_or_checkpoint();
  if (rank0_ && !o.metrics_file.empty())
    metrics_ = std::make_unique<MetricsFile>(o.metrics_file, iteration_ > 0);
  peak_ = mfu_peak(o, backend, memory_.ranks_on_machine);
  if (rank0_) {
    print_banner(o, groups, engine_,
                 {&batches_.loader(), valid_.loader != nullptr, describe_backend(backend), transport, peak_,
                  memory_, valid_.note});
  }
}

void Run::start_from_model_file_or_checkpoint() {
  if (!o_.init_from.empty()) {
    std::vector<float> params;
    load_model_file(o_.init_from, o_.model, params);
    engine_.load_model_weights(params.data());
    if (rank0_) std::printf("gpt_train: weights from %s\n", o_.init_from.c_str());
  }
  if (o_.load.empty()) return;
  // The same job script serves the first start and every restart (a Slurm requeue): nothing saved yet in
  // --load means a fresh start, as in Megatron. Weights only (--finetune) has nothing to start from.
  if (!o_.finetune && !checkpoint_exists(world_, o_.load)) {
    if (rank0_)
      std::printf("gpt_train: no checkpoint in %s yet (no latest): starting from step 0\n", o_.load.c_str());
    return;
  }
  const LoadedCheckpoint c = load_checkpoint(engine_, world_, o_.load, o_.finetune);
  if (!o_.finetune) {
    if (c.position.global_batch != o_.global_batch) {
      throw UsageError("--load " + c.path + " was trained with a global batch of " +
                       std::to_string(c.position.global_batch) + " sequences, this run has " +
                       std::to_string(o_.global_batch) +
                       "; the data position is a stream offset, so set --global-batch-size " +
                       std::to_string(c.position.global_batch) + " (or use --finetune)");
    }
    iteration_ = c.position.iteration;
    skipped_total_ = c.position.skipped_total;
  }
  if (rank0_) {
    std::printf("gpt_train: loaded %s (saved at %d ranks)%s\n", c.path.c_str(), c.saved_world_size,
                o_.finetune ? ", weights only (--finetune)"
                            : (", resuming after step " + std::to_string(iteration_)).c_str());
    if (!c.feedback_note.empty()) std::printf("  note: %s\n", c.feedback_note.c_str());
  }
}

// GPT_FAULT=hang:STEP:RANK (base/fault.h): this rank stops before the step, and the others' watchdog
// (--comm-timeout) must end the job.
void Run::hang_if_asked(int64_t step) const {
  if (!fault_hangs(step, world_.rank())) return;
  std::fprintf(stderr, "GPT_FAULT: rank %d hangs before step %lld\n", world_.rank(),
               static_cast<long long>(step));
  std::fflush(stderr);
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

void Run::loop() {
  StepTraffic traffic(world_);
  run_start_ = std::chrono::steady_clock::now();
  first_iteration_ = iteration_;
  bool exit_now = false;
  while (iteration_ < o_.train_iters && !exit_now) {
    const auto start = std::chrono::steady_clock::now();
    const double lr = o_.schedule.at(engine_.applied_steps());
    hang_if_asked(iteration_ + 1);
    const AfterStep after = scheduled_after(iteration_ + 1);
    const ZeroEngine::StepResult r = engine_.train_step(
        batches_.at(iteration_), lr, stop_asked(),
        after.next_step_follows() ? ZeroEngine::NextCall::kTrainStep : ZeroEngine::NextCall::kUnknown);
    ++iteration_;  // the data position advances on skipped steps too
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    StepMetrics s = measure(r, lr, ms);
    s.traffic = traffic.collect();
    if (after.last || after.exit || r.stop) {  // every rank's peak so far, in the last metrics line
      s.peak_rss_bytes_per_rank = peak_rss_of_ranks();
      s.predicted_peak_bytes = memory_.need;
    }
    if (metrics_) metrics_->write(s);
    interval_.loss += r.loss, interval_.ms += ms, ++interval_.steps, interval_.traffic += s.traffic;
    if (iteration_ == first_iteration_ + 1) {
      print_memory_after_first_step();
      traffic.skip();  // its gather of every rank's peak RSS is no step's traffic
    }
    after_step(r, s, after, exit_now);
  }
  const std::vector<double> peaks = peak_rss_of_ranks();  // checkpoints included
  if (rank0_) print_peak_rss(peaks, memory_);
}

StepMetrics Run::measure(const ZeroEngine::StepResult& r, double lr, double ms) {
  StepMetrics s;
  s.step = iteration_;
  s.loss = r.loss;
  s.lr = lr;
  s.loss_scale = r.loss_scale;
  s.grad_norm = r.grad_norm;
  s.skipped = r.skipped;
  s.skipped_total = skipped_total_ += r.skipped ? 1 : 0;
  s.ms = ms;
  s.tokens_per_s = double(o_.global_batch) * o_.model.seq_len / (ms / 1000.0);
  s.mfu = o_.model.model_flops_per_token() * s.tokens_per_s / world_.size() / peak_.flops_per_s;
  s.device = o_.device;
  s.peak_rss_bytes = peak_rss_bytes();  // rank 0's (the metrics file is rank 0's)
  s.stage_busy_ms = r.stage_busy_ms;
  s.stage_pipeline_ms = r.stage_pipeline_ms;
  return s;
}

Run::AfterStep Run::scheduled_after(int64_t step) const {
  auto every = [step](int64_t interval) { return interval > 0 && step % interval == 0; };
  AfterStep after;
  after.last = step == o_.train_iters;
  after.evaluate = valid_.loader && (every(o_.eval_interval) || after.last);
  after.exit = every(o_.exit_interval);
  after.save = !o_.save.empty() && (every(o_.save_interval) || after.last || after.exit);
  return after;
}

// Validation, the progress line, checkpoints and stopping, in that order, after every step.
void Run::after_step(const ZeroEngine::StepResult& r, const StepMetrics& s, const AfterStep& after,
                     bool& exit_now) {
  if (after.evaluate) last_val_ = evaluate();
  if (rank0_ && (iteration_ % o_.log_interval == 0 || after.last || r.stop)) print_progress(r, s);
  exit_now = r.stop || after.exit;
  if (after.save || (r.stop && !o_.save.empty())) {
    save(r.stop ? "stop asked" : after.last ? "end of training" : "interval");
  }
  if (exit_now && rank0_) {
    std::printf("gpt_train: stopping after step %lld (%s)\n", static_cast<long long>(iteration_),
                r.stop ? stop_reason().c_str() : "--exit-interval");
  }
}

// This rank's wish to stop after the coming step; the step's all-reduce makes it every rank's.
bool Run::stop_asked() const {
  return stop_signal != 0 || past_exit_duration();
}

bool Run::past_exit_duration() const {
  return o_.exit_duration_in_mins > 0 && minutes_since_start() >= o_.exit_duration_in_mins;
}

// Why the job stops, as rank 0 knows it: its own signal or clock, or else another rank's.
std::string Run::stop_reason() const {
  if (stop_signal != 0) return signal_name(stop_signal);
  if (past_exit_duration()) {
    char text[128];
    std::snprintf(text, sizeof text, "--exit-duration-in-mins %g: %.3g minutes since the program started",
                  o_.exit_duration_in_mins, minutes_since_start());
    return text;
  }
  return "another rank's stop signal or --exit-duration-in-mins";
}

void Run::print_progress(const ZeroEngine::StepResult& r, const StepMetrics& s) {
  const Interval& in = interval_;
  const double per_step = in.ms / in.steps;
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start_).count();
  const double eta = elapsed / double(iteration_ - first_iteration_) * double(o_.train_iters - iteration_);
  std::string line = "step " + std::string(5 - std::min<size_t>(5, std::to_string(iteration_).size()), ' ') +
                     std::to_string(iteration_) + "/" + std::to_string(o_.train_iters);
  char rest[512];
  std::snprintf(
      rest, sizeof rest,
      " | loss %.4f%s | lr %.3e | scale %g | grad norm %s | skipped %lld | %.1f ms | %.0f tokens/s | "
      "MFU %.1f%% | intra %s | inter %s per step | ETA %s",
      in.loss / in.steps,
      last_val_ >= 0 ? (" | val loss " + std::to_string(last_val_).substr(0, 6)).c_str() : "", s.lr,
      r.loss_scale, r.skipped ? "overflow" : std::to_string(r.grad_norm).substr(0, 6).c_str(),
      static_cast<long long>(skipped_total_), per_step,
      double(o_.global_batch) * o_.model.seq_len / (per_step / 1000), 100 * s.mfu,
      bytes_text(double(in.traffic.total(comm::Link::kIntraNode)) / in.steps).c_str(),
      bytes_text(double(in.traffic.total(comm::Link::kInterNode)) / in.steps).c_str(),
      duration_text(eta).c_str());
  std::printf("%s%s\n", line.c_str(), rest);
  if (o_.wall_clock_breakdown) {
    std::printf("  time (rank 0): forward %.1f ms, backward %.1f ms, step %.1f ms; waits %s\n", r.forward_ms,
                r.backward_ms, r.optimizer_ms, s.traffic.describe().c_str());
  }
  std::fflush(stdout);
  interval_ = Interval{};
}

// Every rank's VmHWM, gathered over the host world (a collective: every rank calls it).
std::vector<double> Run::peak_rss_of_ranks() {
  const double mine = peak_rss_bytes();
  std::vector<double> all(host_world_.size());
  host_world_.all_gather(&mine, all.data(), sizeof mine, comm::Phase::kOther).wait();
  return all;
}

// Every rank's peak RSS so far beside the memory the engine and the guard account for (a collective).
void Run::print_memory_after_first_step() {
  const std::vector<double> peaks = peak_rss_of_ranks();
  if (rank0_) {
    print_first_step_memory(o_, engine_, data_parallel_.size(), host_world_.topology(), memory_, peaks,
                            backend_peak_device_bytes(backend_));
  }
}

double Run::evaluate() {
  const double loss = validation_loss(engine_, *valid_.loader, o_.micro_batch, o_.model.seq_len,
                                      o_.eval_iters, data_parallel_);
  if (rank0_) {
    std::printf("validation after step %lld | val loss %.4f | ppl %.2f\n", static_cast<long long>(iteration_),
                loss, std::exp(loss));
    if (metrics_)
      metrics_->write_raw("{\"step\": " + std::to_string(iteration_) +
                          ", \"val_loss\": " + to_json_number(loss) + "}");
  }
  return loss;
}

void Run::save(const char* why) {
  const TrainingPosition position{iteration_, skipped_total_, o_.global_batch, uint64_t(o_.seed)};
  const std::string path = save_checkpoint(engine_, world_, o_.save, position, o_.keep_checkpoints);
  if (rank0_) std::printf("gpt_train: saved %s (%s)\n", path.c_str(), why);
  std::fflush(stdout);
}

int train(const TrainOptions& o, comm::Communicator& world) {
  // From here a stop signal ends the run at a step's end, after a checkpoint (one that comes during start-up
  // at the end of the first step).
  std::signal(SIGTERM, on_stop_signal);
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGUSR1, on_stop_signal);
  if (o.threads > 0) cpu::set_num_threads(o.threads);
  const std::unique_ptr<Ops> backend = make_backend(o.device, world.topology().machine_rank());
  if (backend) backend->set_matmul_inputs(gemm_dtype(o, backend.get()));
  const DeviceWorld device_world =
      make_device_world(world, backend.get(), o.comm_timeout, o.zero.offload.swaps_through_wire());
  const ParallelGroups groups(device_world.nccl ? *device_world.nccl : world, o.tensor_parallel,
                              o.pipeline.stages, o.pipeline.virtual_stages(o.model));
  Run run(o, groups, backend.get(), device_world.description, world);
  run.loop();
  // Training is over: a signal from here on (a launcher ending a job whose MPI_Finalize hangs) ends the rank.
  for (const int signal : {SIGTERM, SIGINT, SIGUSR1}) std::signal(signal, SIG_DFL);
  return 0;
}

// Every rank validates the same inputs, so a mistake stops every rank with the same line (no hang).
int run(comm::MpiSession& session, int argc, char** argv) {
  TrainOptions options;
  if (!parse_train_options(argc, argv, session.world_size(), &options)) return 0;
  if (options.plan.enabled) {
    if (session.world_rank() == 0) std::fputs(plan_report(options).c_str(), stdout);
    return 0;
  }
  comm::MpiOptions mpi_options;
  mpi_options.ranks_per_node = options.ranks_per_node;
  mpi_options.comm_timeout_s = options.comm_timeout;
  std::unique_ptr<comm::Communicator> world = session.world(mpi_options);
  return train(options, *world);
}

}  // namespace
}  // namespace gpt

int main(int argc, char** argv) {
  return gpt::comm::run_mpi_main(
      "gpt_train", argc, argv, [&](gpt::comm::MpiSession& session) { return gpt::run(session, argc, argv); });
}
