// The table of op cases every backend is checked and timed on (ggml's test-backend-ops is the model). A case
// names an op of the device seam (kernels/ops.h) at one shape: the tensors it takes and how each starts, the
// outputs to compare, the tolerance, and how to run it on any Ops. kernels/cases/run_case.h runs a case in
// three modes: against the CPU backend in fp64 (the reference), its backward against central finite
// differences, and timed. tests/kernels (CpuOps), tests/kernels_cuda and scripts/gpu_check's op table
// (CudaOps) and bench/kernels run this one table.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "kernels/ops.h"

namespace gpt::cases {

// The sizes a table is built at: B sequences of T tokens of width C in NH heads, a vocabulary of V ids
// padded to Vp as GPTConfig::padded_vocab pads it.
struct Sizes {
  int B = 2, T = 64, C = 64, NH = 4, V = 1000;
  // Float tensors start this many elements past the arena's 64-byte alignment (1: the paths for pointers
  // that are no multiple of 16 bytes).
  int offset = 0;
  int64_t N() const { return int64_t(B) * T; }
  int64_t Vp() const { return (int64_t(V) + 127) / 128 * 128; }
  std::string describe() const;  // "B=4 T=1024 C=768 NH=12 V=50257"
};

// GPT-2 124M at B = 4, T = 1024.
Sizes gpt2_124m();
// The shapes a real model meets beyond 124M's, each with why: T no multiple of the attention tile and T = 1,
// head size 128, widths and vocabularies that are no multiple of a vector, more sequences than one attention
// launch takes, many rows for the chunked reductions. Small enough for a GPU test's time.
std::vector<std::pair<Sizes, std::string>> edge_sizes();

// One tensor of a case. Float tensors take the dtype the case runs in; tokens are i32.
struct Arg {
  std::string name;
  std::vector<int64_t> shape;
  double scale = 1;      // float: standard normal values times scale (0: zeros)
  int token_below = 0;   // > 0: i32 token ids in [0, token_below)
  bool input = false;    // what the gradient check perturbs (never a tensor the op writes)
  bool squared = false;  // the values squared (Adam's second moments)
  // fp32 when the case runs in fp16 or bf16 (the layer ops' mixed-precision contract, kernels/ops.h:
  // LayerNorm's statistics, parameter gradients, losses); the case's dtype otherwise.
  bool fp32 = false;
  // Attention's residual: shape is the probabilities' [B, NH, T, T], and a backend that keeps one
  // log-sum-exp per row instead (Ops::attention_residual() == kLogSumExp) gets [B, NH, T]; the reference is
  // then the CPU's flash attention (kernels/cpu/flash_cpu_ops.h), so the residuals compare like for like.
  bool attention_residual = false;
};

// The tensors of a case on one backend, by name.
struct CaseTensors {
  std::map<std::string, Tensor> by_name;
  const Tensor& operator[](const std::string& name) const;
};
using CaseRun = std::function<void(Ops&, const CaseTensors&)>;

// One op at one shape: prepare() (may be empty) computes what the op reads that another op writes (a
// backward's saved state, from its forward), then run() is the op itself, the part the timed mode times.
// Outputs start from their Arg values, so an accumulating op is compared with what it adds.
struct OpCase {
  std::string family;  // the group a table selects by: "layernorm", "linear", ...
  std::string op;      // "layernorm_backward"
  std::string shape;   // "[4096, 768]"
  std::vector<Arg> args;
  std::vector<std::string> outputs;  // compared against the reference
  double tolerance = 1e-5;           // max |got - ref| / max |ref| for fp32 tensors
  double flops = 0;                  // per run, for the timed mode's GFLOP/s (0: not shown)
  CaseRun prepare, run;
  // The dtype the CPU computes the reference in: fp64, or fp32 for an op it has in fp32 only (AdamW).
  DType reference = DType::kF64;
  int offset = 0;  // Sizes::offset
};

// A forward and its backward, for the finite-difference check: L = sum_i dout_i * output_i, so the backward
// given dout yields dL/dinput; each (input, gradient) pair is checked along one random direction.
struct GradientCase {
  std::string family, op, shape;
  std::vector<Arg> args;
  std::string output, dout;
  std::vector<std::pair<std::string, std::string>> wrt;  // (input, the gradient the backward writes)
  CaseRun forward, backward;
  int offset = 0;  // Sizes::offset
};

std::vector<OpCase> op_cases(const Sizes& s);
std::vector<GradientCase> gradient_cases(const Sizes& s);
// The families, in table order.
std::vector<std::string> families();

}  // namespace gpt::cases
