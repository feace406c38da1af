// The checks of the equivalence table: each runs ops of the device seam (kernels/ops.h) on CpuOps and on
// CudaOps from the same starting bytes and adds one row per compared output to the table.
//   float ops  (float_checks.cc)  fp32 within a relative tolerance; also with the GPU's inputs rounded to
//                                 fp16 and bf16 (the compute weights' precision), against the CPU's fp32
//   exact ops  (exact_checks.cc)  casts, adds, division, dropout masks: byte-identical; reductions, AdamW
//   quantizers (quant_checks.cc)  every bit width and input dtype, with error feedback: byte-identical
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "tests/gpu_check/scratch.h"
#include "tests/gpu_check/table.h"

namespace gpt::gpu_check {

// GPT-2 124M: B sequences of T tokens, width C, NH heads, vocabulary V padded to Vp.
struct Shapes {
  int B = 4, T = 1024, C = 768, NH = 12, V = 50257, Vp = 50304;
  int64_t N() const { return int64_t(B) * T; }
};

inline constexpr double kF32Tolerance = 1e-5;
inline constexpr double kF16Tolerance = 1e-2;
inline constexpr double kBF16Tolerance = 4e-2;

// One float op: run(ops, gpu_side) calls it on one backend's tensors. Every twin is reset to its starting
// bytes before each run; `inputs` are the ones rounded to fp16/bf16 in those variants.
struct FloatCase {
  std::string op;
  std::string shape;
  std::vector<const Twin*> inputs;
  std::vector<std::pair<std::string, const Twin*>> outputs;
  std::vector<const Twin*> others;  // reset too, never rounded (accumulators, saved statistics)
  std::function<void(Ops&, bool)> run;
  bool half_variants = true;
};
void check_float_op(Table& table, Scratch& scratch, const FloatCase& c);

// One row per compared byte buffer; `extra` joins the error text (e.g. a flag that differs).
void add_bytes_row(Table& table, const std::string& op, const std::string& dtype, const std::string& shape,
                   const std::vector<uint8_t>& cpu, const std::vector<uint8_t>& gpu, bool extra_ok = true,
                   const std::string& extra = "");

using CheckFunction = void (*)(Table&, Backends&, const Shapes&);
struct NamedCheck {
  const char* name;
  CheckFunction run;
};

void check_embedding(Table& table, Backends& backends, const Shapes& s);
void check_layernorm(Table& table, Backends& backends, const Shapes& s);
void check_linear(Table& table, Backends& backends, const Shapes& s);
void check_attention(Table& table, Backends& backends, const Shapes& s);
void check_gelu(Table& table, Backends& backends, const Shapes& s);
void check_cross_entropy(Table& table, Backends& backends, const Shapes& s);
void check_elementwise(Table& table, Backends& backends, const Shapes& s);
void check_dropout(Table& table, Backends& backends, const Shapes& s);
void check_reductions(Table& table, Backends& backends, const Shapes& s);
void check_adamw(Table& table, Backends& backends, const Shapes& s);
void check_quantizers(Table& table, Backends& backends, const Shapes& s);

// In table order.
inline const std::vector<NamedCheck>& all_checks() {
  static const std::vector<NamedCheck> checks = {
      {"embedding", check_embedding},
      {"layernorm", check_layernorm},
      {"linear", check_linear},
      {"attention", check_attention},
      {"gelu", check_gelu},
      {"cross_entropy", check_cross_entropy},
      {"elementwise", check_elementwise},
      {"dropout", check_dropout},
      {"reductions", check_reductions},
      {"adamw", check_adamw},
      {"quantizers", check_quantizers},
  };
  return checks;
}

}  // namespace gpt::gpu_check
