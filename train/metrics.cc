// StepTraffic, SGEMM rate, metrics file; see metrics.h.
#include "train/metrics.h"

#include <Eigen/Core>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>

#include "base/user_error.h"
#include "tensor/arena.h"

namespace gpt {

StepTraffic::StepTraffic(comm::Communicator& world) : world_(world), baseline_(world.meter().snapshot()) {}

comm::TrafficCounts StepTraffic::collect() {
  const comm::TrafficCounts mine = world_.meter().snapshot() - baseline_;
  comm::TrafficCounts total = comm::sum_over_ranks(world_, mine);
  baseline_ = world_.meter().snapshot();  // after the sum's own messages, which belong to no step
  for (double& wait : total.wait_ms) wait /= world_.size();  // the mean over ranks
  return total;
}

double measure_sgemm_gflops(int n) {
  Eigen::MatrixXf a = Eigen::MatrixXf::Random(n, n), b = Eigen::MatrixXf::Random(n, n), c(n, n);
  c.noalias() = a * b;  // warm-up
  double best = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    c.noalias() = a * b;
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return 2.0 * double(n) * n * n / best / 1e9;
}

double measure_gemm_gflops(Ops& ops, int n) {
  Arena arena("gemm rate", Arena::kUnlimited, &ops.device_memory());
  const Tensor a = arena.allocate_tensor("a", "gemm", {n, n}, DType::kF32);
  const Tensor b = arena.allocate_tensor("b", "gemm", {n, n}, DType::kF32);
  const Tensor c = arena.allocate_tensor("c", "gemm", {n, n}, DType::kF32);
  ops.fill(a, 0.5);
  ops.fill(b, 0.25);
  ops.linear_forward(c, a, b, Tensor{});  // warm-up (and any one-time setup of the library)
  ops.synchronize();
  double best = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    ops.linear_forward(c, a, b, Tensor{});
    ops.synchronize();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return 2.0 * double(n) * n * n / best / 1e9;
}

std::string to_json(const StepMetrics& m) {
  nlohmann::ordered_json j;
  j["step"] = m.step;
  j["loss"] = m.loss;
  j["lr"] = m.lr;
  j["loss_scale"] = m.loss_scale;
  j["grad_norm"] = m.skipped ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(m.grad_norm);
  j["skipped"] = m.skipped;
  j["skipped_total"] = m.skipped_total;
  j["ms"] = m.ms;
  j["tokens_per_s"] = m.tokens_per_s;
  j["mfu"] = m.mfu;
  j["device"] = m.device;
  j["peak_rss_bytes"] = m.peak_rss_bytes;
  if (!m.peak_rss_bytes_per_rank.empty()) {
    j["peak_rss_bytes_per_rank"] = m.peak_rss_bytes_per_rank;
    j["predicted_peak_bytes"] = m.predicted_peak_bytes;
  }
  j["bytes_intra_node"] = m.traffic.total(comm::Link::kIntraNode);
  j["bytes_inter_node"] = m.traffic.total(comm::Link::kInterNode);
  nlohmann::ordered_json phases, waits;
  for (int p = 0; p < comm::kNumPhases; ++p) {
    const auto phase = comm::Phase(p);
    phases[comm::phase_name(phase)] = {{"intra", m.traffic.at(phase, comm::Link::kIntraNode)},
                                       {"inter", m.traffic.at(phase, comm::Link::kInterNode)}};
    waits[comm::phase_name(phase)] = m.traffic.wait_ms[p];
  }
  if (!m.stage_busy_ms.empty()) {
    j["stage_busy_ms"] = m.stage_busy_ms;
    j["stage_pipeline_ms"] = m.stage_pipeline_ms;
  }
  j["bytes_by_phase"] = phases;
  j["comm_wait_ms"] = waits;
  return j.dump();
}

MetricsFile::MetricsFile(const std::string& path, bool append)
    : file_(std::fopen(path.c_str(), append ? "a" : "w")) {
  if (!file_) {
    throw UsageError("--metrics-file " + path + ": cannot open for writing (" + std::strerror(errno) +
                     "); check the directory exists and is writable");
  }
}

std::string to_json_number(double value) {
  return nlohmann::json(value).dump();
}

MetricsFile::~MetricsFile() {
  if (file_) std::fclose(file_);
}

void MetricsFile::write(const StepMetrics& m) {
  write_raw(to_json(m));
}

void MetricsFile::write_raw(const std::string& line) {
  std::fputs(line.c_str(), file_);
  std::fputc('\n', file_);
  std::fflush(file_);
}

}  // namespace gpt
