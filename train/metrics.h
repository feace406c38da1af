// Per-step measurements of gpt_train: the traffic of a step summed over ranks (from each rank's meter), the
// machine's SGEMM rate for MFU, and the JSON Lines metrics file (one object per optimizer step, rank 0).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/traffic.h"
#include "kernels/ops.h"

namespace gpt {

// The traffic of one step over all ranks: each rank's counts since the previous call, summed exactly over
// ranks (comm::sum_over_ranks), with wait_ms as the mean over ranks. The summing's own bytes belong to no
// step: the next one is measured from a snapshot taken after it.
class StepTraffic {
 public:
  explicit StepTraffic(comm::Communicator& world);
  comm::TrafficCounts collect();
  // What this rank sent since the last collect() belongs to no step (gpt_train's gather of every rank's peak
  // RSS after the first step): leave it out of the next one.
  void skip() { baseline_ = world_.meter().snapshot(); }

 private:
  comm::Communicator& world_;
  comm::TrafficCounts baseline_;
};

// Single-precision GEMM rate of this process in GFLOP/s (Eigen, n^3, best of a few), measured while every
// rank does the same, so the rate is each rank's share of the machine.
double measure_sgemm_gflops(int n);
// The same rate measured through a backend's linear_forward on its own memory (for the CUDA backend: the
// cuBLAS fp32 GEMM rate, TF32 off), synchronized around each timed call.
double measure_gemm_gflops(Ops& ops, int n);

struct StepMetrics {
  int64_t step = 0;
  double loss = 0, lr = 0, loss_scale = 1, grad_norm = 0;
  bool skipped = false;
  int64_t skipped_total = 0;
  double ms = 0, tokens_per_s = 0, mfu = 0;
  std::string device = "cpu";  // --device
  double peak_rss_bytes = 0;   // VmHWM of the rank writing the metrics so far
  // The last step only: every rank's VmHWM and the memory guard's prediction (train/memory_guard.h).
  std::vector<double> peak_rss_bytes_per_rank;
  double predicted_peak_bytes = 0;
  comm::TrafficCounts traffic;
  // Pipeline stages' compute time and micro-batch time this step (ZeroEngine::StepResult).
  std::vector<double> stage_busy_ms, stage_pipeline_ms;
};

// Appends one JSON object per line; each line is flushed as written, so a crash loses at most the line in
// progress.
class MetricsFile {
 public:
  // Truncates the file, or appends to it when resuming. Throws UsageError naming the path when it cannot open
  // it.
  MetricsFile(const std::string& path, bool append);
  ~MetricsFile();
  void write(const StepMetrics& m);
  void write_raw(const std::string& json_line);

 private:
  std::FILE* file_ = nullptr;
};

std::string to_json(const StepMetrics& m);
// A double as JSON writes it (shortest round-trip form).
std::string to_json_number(double value);

}  // namespace gpt
