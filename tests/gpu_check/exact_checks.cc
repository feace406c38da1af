// The ops whose results are defined to the bit (one correctly rounded operation per element, or the
// counter-based dropout masks): byte-identical to the CPU. Also the reductions (double results, relative
// 1e-5; the finite check's answer exactly) and AdamW (fp32, relative 1e-5).
#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "tests/gpu_check/checks.h"

namespace gpt::gpu_check {

void add_bytes_row(Table& table, const std::string& op, const std::string& dtype, const std::string& shape,
                   const std::vector<uint8_t>& cpu, const std::vector<uint8_t>& gpu, bool extra_ok,
                   const std::string& extra) {
  const size_t differ = bytes_differing(cpu.data(), gpu.data(), std::min(cpu.size(), gpu.size())) +
                        (cpu.size() > gpu.size() ? cpu.size() - gpu.size() : gpu.size() - cpu.size());
  std::string error = std::to_string(differ) + " bytes differ";
  if (!extra.empty()) error += ", " + extra;
  table.add(Row{op, dtype, shape, error, "identical", differ == 0 && extra_ok});
}

namespace {

// Runs `run` on each backend from the twins' starting bytes and compares `output` byte for byte.
template <typename Run>
void exact_op(Table& table, Scratch& x, const std::string& op, const std::string& dtype,
              const std::vector<const Twin*>& twins, const Twin& output, Run&& run) {
  std::vector<uint8_t> cpu;
  try {
    for (const Twin* t : twins) x.reset(*t, false);
    run(x.backends().cpu, false);
    cpu = x.bytes(output, false);
  } catch (const std::exception& e) {
    table.add_failure(op + " (CPU reference)", dtype, shape_string(output.cpu.shape), e.what());
    return;
  }
  try {
    for (const Twin* t : twins) x.reset(*t, true);
    run(x.backends().gpu, true);
    add_bytes_row(table, op, dtype, shape_string(output.cpu.shape), cpu, x.bytes(output, true));
  } catch (const std::exception& e) {
    table.add_failure(op, dtype, shape_string(output.cpu.shape), e.what());
  }
}

const char* dtype_label(DType dtype) {
  return dtype == DType::kF16 ? "fp16" : dtype == DType::kBF16 ? "bf16" : "fp32";
}

}  // namespace

void check_elementwise(Table& table, Backends& backends, const Shapes& s) {
  Scratch x(backends);
  const std::vector<int64_t> shape = {s.N(), s.C};
  const Twin& a = x.random(shape, 61, 4.0f);
  const Twin& b = x.random(shape, 62, 1e-3f);
  const Twin& out = x.random(shape, 63);
  exact_op(table, x, "add", "fp32", {&a, &b, &out}, out,
           [&](Ops& ops, bool g) { ops.add(out.on(g), a.on(g), b.on(g)); });
  exact_op(table, x, "add_into", "fp32", {&a, &b}, a,
           [&](Ops& ops, bool g) { ops.add_into(a.on(g), b.on(g)); });
  exact_op(table, x, "divide", "fp32", {&a}, a, [&](Ops& ops, bool g) { ops.divide(a.on(g), 3.0f); });
  exact_op(table, x, "fill", "fp32", {&out}, out, [&](Ops& ops, bool g) { ops.fill(out.on(g), 0.1); });
  for (DType half : {DType::kF16, DType::kBF16}) {
    const Twin& narrow = x.raw(shape, half, {});
    for (float scale : {1.0f, 1024.0f}) {
      exact_op(table, x,
               "cast fp32->" + std::string(dtype_label(half)) + " scale " + std::to_string(int(scale)),
               dtype_label(half), {&a, &narrow}, narrow,
               [&](Ops& ops, bool g) { ops.cast(narrow.on(g), a.on(g), scale); });
    }
    exact_op(table, x, "cast " + std::string(dtype_label(half)) + "->fp32", "fp32", {&a, &narrow, &out}, out,
             [&](Ops& ops, bool g) {
               ops.cast(narrow.on(g), a.on(g), 1.0f);
               ops.cast(out.on(g), narrow.on(g), 1.0f);
             });
  }
}

void check_dropout(Table& table, Backends& backends, const Shapes& s) {
  Scratch x(backends);
  const std::vector<int64_t> shape = {s.B, int64_t(s.T) * s.C};
  std::vector<uint64_t> keys(s.B);
  for (int b = 0; b < s.B; ++b) keys[b] = 0x9e3779b97f4a7c15ull * uint64_t(b + 1);
  const Twin& in = x.random(shape, 71);
  const Twin& out = x.random(shape, 72);
  // The last run draws at an element offset, as a sequence-parallel rank's slice of each sequence does.
  const int64_t offset = int64_t(s.T) * s.C;
  const std::pair<double, int64_t> runs[] = {{0.1, 0}, {0.5, 0}, {0.1, offset}};
  for (const auto& [p, element_offset] : runs) {
    const DropoutMask mask{p, keys.data(), element_offset};
    const std::string label = " p " + std::to_string(p).substr(0, 3) + (element_offset ? " offset" : "");
    exact_op(table, x, "dropout_forward" + label, "fp32", {&in, &out}, out,
             [&](Ops& ops, bool g) { ops.dropout_forward(out.on(g), in.on(g), mask); });
    exact_op(table, x, "dropout_backward" + label, "fp32", {&in, &out}, out,
             [&](Ops& ops, bool g) { ops.dropout_backward(out.on(g), in.on(g), mask); });
  }
}

namespace {
void reduction_row(Table& table, const std::string& op, const std::string& shape, double cpu, double gpu) {
  const double error = cpu != 0 ? std::fabs(gpu - cpu) / std::fabs(cpu) : std::fabs(gpu);
  table.add(Row{op, "fp32", shape, scientific(error), "<= " + scientific(kF32Tolerance),
                std::isfinite(gpu) && error <= kF32Tolerance});
}

void finite_row(Table& table, Backends& backends, const Twin& t, const std::string& what, bool expected) {
  try {
    const bool cpu = backends.cpu.all_finite(t.cpu), gpu = backends.gpu.all_finite(t.gpu);
    table.add(Row{"all_finite " + what, "fp32", shape_string(t.cpu.shape),
                  std::string("cpu ") + (cpu ? "true" : "false") + ", gpu " + (gpu ? "true" : "false"),
                  expected ? "true" : "false", cpu == expected && gpu == expected});
  } catch (const std::exception& e) {
    table.add_failure("all_finite " + what, "fp32", shape_string(t.cpu.shape), e.what());
  }
}
}  // namespace

void check_reductions(Table& table, Backends& backends, const Shapes&) {
  Scratch x(backends);
  const int64_t n = 124475904;  // GPT-2 124M's parameter count (with wte padded): a global-norm sum
  std::vector<float> v = normal_values(n, 81, 0.01f);
  const Twin& grads = x.values({n}, v);
  const std::string shape = shape_string({n});
  try {
    reduction_row(table, "sum", shape, backends.cpu.sum(grads.cpu), backends.gpu.sum(grads.gpu));
    reduction_row(table, "sum_of_squares", shape, backends.cpu.sum_of_squares(grads.cpu),
                  backends.gpu.sum_of_squares(grads.gpu));
  } catch (const std::exception& e) {
    table.add_failure("sum, sum_of_squares", "fp32", shape, e.what());
  }
  finite_row(table, backends, grads, "finite", true);
  v[n - 12345] = std::numeric_limits<float>::quiet_NaN();
  finite_row(table, backends, x.values({n}, v), "one NaN", false);
  v[n - 12345] = 1.0f;
  v[777] = -std::numeric_limits<float>::infinity();
  finite_row(table, backends, x.values({n}, v), "one -inf", false);
}

}  // namespace gpt::gpu_check
