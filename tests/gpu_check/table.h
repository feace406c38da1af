// The table scripts/gpu_check prints: one row per check with what was compared, the measured error, the
// tolerance and PASS/FAIL, and the two error measures every row uses.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace gpt::gpu_check {

struct Row {
  std::string op;     // "layernorm_backward dx"
  std::string dtype;  // "fp32", "fp16", "int4", ...
  std::string shape;  // "[4096, 768]"
  std::string error;  // what was measured: "3.1e-07", "0 bytes differ", or the exception's message
  std::string tolerance;
  bool pass = false;
  bool supported = true;  // false: the backend lacks the op in this dtype ("not supported", neither way)
};

class Table {
 public:
  // Prints the row at once (a long run shows its progress) and keeps it for the summary.
  void add(Row row);
  // A FAIL row for a check that threw before it could measure anything.
  void add_failure(const std::string& op, const std::string& dtype, const std::string& shape,
                   const std::string& message);
  int failures() const;
  size_t size() const { return rows_.size(); }
  static void print_header();

 private:
  std::vector<Row> rows_;
};

// max_i |gpu_i - cpu_i| / max_i |cpu_i|: the largest difference relative to the CPU result's largest
// magnitude (an element-wise ratio would divide by values that are zero up to rounding). NaN or inf
// anywhere gives inf; an all-zero CPU result gives the absolute difference.
double max_relative_error(const std::vector<float>& cpu, const std::vector<float>& gpu);
// How many bytes differ (sizes that differ count the difference too).
size_t bytes_differing(const void* cpu, const void* gpu, size_t bytes);

std::string shape_string(const std::vector<int64_t>& shape);
std::string scientific(double value);  // "3.1e-07"

}  // namespace gpt::gpu_check
