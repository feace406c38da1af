// equivalence: the CUDA backend, op by op (scripts/gpu_check's `ops` step), and cuBLAS's GEMM rates (its
// `gemm` step). Every op of the device seam (kernels/ops.h), forward and backward, runs on CudaOps from the
// same random inputs as its reference at GPT-2 124M's shapes: the layer ops are the op-case table's
// (kernels/cases) against the CPU in fp64, the engine ops against CpuOps. The table prints one row per
// compared output with its error, its tolerance and PASS, FAIL or "not supported" (a dtype CudaOps does not
// take yet; checks.h says which tolerance applies where).
//
//   equivalence [--batch B] [--seq T] [--width C] [--heads NH] [--vocab V] [--offset E] [--only NAME,...]
//               [--dtype fp32|fp16|bf16]        the table; exit 0 when every row passes, 1 otherwise
//   equivalence --list                          the checks' names, one a line
//   equivalence --gemm [--batch B]              cuBLAS TFLOP/s at the 124M's fc and lm_head GEMMs
//   equivalence --attention [--batch B] [--seq T] [--width C] [--heads NH]
//                                               ms of the flash-attention kernels beside the T x T ones
// The shape flags reach what 124M's shapes never do: a T that is no multiple of the attention tile, head
// size 128, widths and vocabularies that are no multiple of a vector (the unaligned fallbacks), and more
// sequences than one attention launch takes (its batch chunks); --offset E starts the layer ops' float
// tensors E elements past their alignment (the paths for pointers that are no multiple of 16 bytes); --dtype
// keeps the layer ops' rows of one dtype (the other checks have their own dtypes and ignore it).
// scripts/gpu_check runs each check of each shape in its own process, so a faulting kernel (a sticky CUDA
// error) costs one row. Without a usable GPU it prints one line and exits 2. TF32 stays off: CudaOps' fp32
// GEMMs are true fp32, and scripts/gpu_check also sets NVIDIA_TF32_OVERRIDE=0 for the table.
#include <malloc.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

#include "kernels/cuda/runtime.h"
#include "tests/gpu_check/attention_rate.h"
#include "tests/gpu_check/checks.h"
#include "tests/gpu_check/gemm_rate.h"

namespace {

struct Options {
  gpt::gpu_check::Shapes shapes;
  std::string only;  // comma-separated check names; empty: all
  bool gemm = false, attention = false, list = false;
};

const char* kUsage =
    "usage: equivalence [--batch B] [--seq T] [--width C] [--heads NH] [--vocab V] [--offset E] "
    "[--only NAME,...] [--dtype fp32|fp16|bf16] "
    "[--list] [--gemm] [--attention]\n";

// The value of a shape flag, or 0 when it is no integer in [1, most].
int shape_value(const char* text, int most) {
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  return (*end == '\0' && v >= 1 && v <= most) ? int(v) : 0;
}

bool parse_shape_flag(const std::string& arg, const char* value, gpt::gpu_check::Shapes& s) {
  int* field = arg == "--batch"    ? &s.B
               : arg == "--seq"    ? &s.T
               : arg == "--width"  ? &s.C
               : arg == "--heads"  ? &s.NH
               : arg == "--vocab"  ? &s.V
               : arg == "--offset" ? &s.offset
                                   : nullptr;
  if (!field) return false;
  *field = shape_value(value, 1 << 20);
  if (arg == "--offset") return *field > 0 && *field < 16;
  if (arg == "--vocab") s.Vp = (s.V + 127) / 128 * 128;  // as GPTConfig::padded_vocab() pads it
  return *field > 0;
}

bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--gemm") {
      o.gemm = true;
    } else if (arg == "--attention") {
      o.attention = true;
    } else if (arg == "--list") {
      o.list = true;
    } else if (arg == "--only" && i + 1 < argc) {
      o.only = argv[++i];
    } else if (arg == "--dtype" && i + 1 < argc) {
      o.shapes.dtype = argv[++i];
      if (o.shapes.dtype != "fp32" && o.shapes.dtype != "fp16" && o.shapes.dtype != "bf16") return false;
    } else if (i + 1 < argc && parse_shape_flag(arg, argv[i + 1], o.shapes)) {
      ++i;
    } else {
      return false;
    }
  }
  return o.shapes.C % o.shapes.NH == 0;
}

bool selected(const Options& o, const char* name) {
  return o.only.empty() || ("," + o.only + ",").find("," + std::string(name) + ",") != std::string::npos;
}

int print_gemm_rates(const gpt::cuda::Context& ctx, int tokens) {
  std::printf("%-10s %-8s %-24s %s\n", "gemm", "layer", "m x n x k", "TFLOP/s");
  for (const auto& r : gpt::gpu_check::measure_gemm_rates(ctx, tokens)) {
    const std::string mnk = std::to_string(r.m) + " x " + std::to_string(r.n) + " x " + std::to_string(r.k);
    std::printf("%-10s %-8s %-24s %.1f\n", ("gemm_" + r.precision).c_str(), r.layer.c_str(), mnk.c_str(),
                r.tflops);
  }
  return 0;
}

// The flash-attention kernels beside the older T x T ones, at the shape's B, T, C and NH.
int print_attention_times(gpt::cuda::CudaOps& ops, const gpt::gpu_check::Shapes& s) {
  std::printf("attention at B=%d T=%d C=%d NH=%d, ms per call\n", s.B, s.T, s.C, s.NH);
  std::printf("%-10s %-8s %-12s %s\n", "kernel", "inputs", "forward", "backward");
  for (const auto& t : gpt::gpu_check::measure_attention_times(ops, s.B, s.T, s.C, s.NH))
    std::printf("%-10s %-8s %-12.3f %.3f\n", t.kernel.c_str(), t.inputs.c_str(), t.forward_ms, t.backward_ms);
  return 0;
}

int run_table(gpt::gpu_check::Backends& backends, const Options& o) {
  const gpt::gpu_check::Shapes& shapes = o.shapes;
  std::printf("equivalence: CudaOps at B=%d T=%d C=%d NH=%d V=%d (padded %d)\n", shapes.B, shapes.T, shapes.C,
              shapes.NH, shapes.V, shapes.Vp);
  std::printf("error: max |cuda - reference| / max |reference| over the tensor, or the bytes that differ\n");
  gpt::gpu_check::Table table;
  gpt::gpu_check::Table::print_header();
  for (const auto& check : gpt::gpu_check::all_checks()) {
    if (!selected(o, check.name)) continue;
    try {
      check.run(table, backends, shapes);
    } catch (const std::exception& e) {  // setting up the check itself failed (memory, a sticky error)
      table.add_failure(check.name, "-", "-", e.what());
    }
  }
  std::printf("equivalence: %zu checks, %d failed\n", table.size(), table.failures());
  return table.failures() ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  if (!parse(argc, argv, options)) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  if (options.list) {  // needs no GPU: scripts/gpu_check --dry-run plans with it
    for (const auto& check : gpt::gpu_check::all_checks()) std::printf("%s\n", check.name);
    return 0;
  }
  // The op cases allocate and free host buffers of up to 1.6 GB each (the LM head's logits in fp64). glibc
  // maps each afresh and the kernel faults every page in again: on 2 cores that system time was two thirds
  // of the cross_entropy check (2.1 min, 1.0 min with the heap kept). Keep freed memory in the heap.
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, -1);
  const gpt::cuda::DeviceProbe probe = gpt::cuda::probe_devices();
  if (probe.count == 0) {
    std::printf("equivalence: no CUDA device is present (%s); the CUDA checks need an NVIDIA GPU\n",
                probe.problem.c_str());
    return 2;
  }
  try {
    gpt::gpu_check::Backends backends;
    std::printf("equivalence: device 0 of %d: %s\n", probe.count,
                backends.gpu.context().info().describe().c_str());
    if (options.gemm) return print_gemm_rates(backends.gpu.context(), options.shapes.B * 1024);
    if (options.attention) return print_attention_times(backends.gpu, options.shapes);
    return run_table(backends, options);
  } catch (const std::exception& e) {
    std::printf("equivalence: %s\n", e.what());
    return 1;
  }
}
