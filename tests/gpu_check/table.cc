// Table rows and error measures; see table.h.
#include "tests/gpu_check/table.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

namespace gpt::gpu_check {

namespace {
constexpr const char* kFormat = "%-36s %-5s %-20s %-16s %-12s %s\n";
}

void Table::print_header() {
  std::printf(kFormat, "op", "dtype", "shape", "error", "tolerance", "result");
}

void Table::add(Row row) {
  std::string error = row.error;
  std::replace(error.begin(), error.end(), '\n', ' ');
  std::printf(kFormat, row.op.c_str(), row.dtype.c_str(), row.shape.c_str(), error.c_str(),
              row.tolerance.c_str(),
              !row.supported ? "not supported"
              : row.pass     ? "PASS"
                             : "FAIL");
  std::fflush(stdout);
  rows_.push_back(std::move(row));
}

void Table::add_failure(const std::string& op, const std::string& dtype, const std::string& shape,
                        const std::string& message) {
  add(Row{op, dtype, shape, message, "-", false});
}

int Table::failures() const {
  return int(std::count_if(rows_.begin(), rows_.end(), [](const Row& r) { return r.supported && !r.pass; }));
}

double max_relative_error(const std::vector<float>& cpu, const std::vector<float>& gpu) {
  if (cpu.size() != gpu.size()) return std::numeric_limits<double>::infinity();
  double largest = 0, worst = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    const double c = cpu[i], g = gpu[i];
    if (!std::isfinite(c) || !std::isfinite(g)) return std::numeric_limits<double>::infinity();
    largest = std::max(largest, std::fabs(c));
    worst = std::max(worst, std::fabs(g - c));
  }
  return largest > 0 ? worst / largest : worst;
}

size_t bytes_differing(const void* cpu, const void* gpu, size_t bytes) {
  const auto* a = static_cast<const unsigned char*>(cpu);
  const auto* b = static_cast<const unsigned char*>(gpu);
  size_t differ = 0;
  for (size_t i = 0; i < bytes; ++i) differ += a[i] != b[i];
  return differ;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string scientific(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1e", value);
  return text;
}

}  // namespace gpt::gpu_check
