// The checks of the equivalence table: CudaOps on the ops of the device seam (kernels/ops.h), one row per
// compared output.
//   layer ops  (case_checks.cc)   the op-case table (kernels/cases) in fp32, fp16 and bf16 against the CPU's
//                                 fp64 reference, the half rows through CudaOps' mixed-precision contract
//                                 (kernels/ops.h: statistics, parameter gradients, losses fp32); a dtype
//                                 CudaOps lacks is a "not supported" row (AdamW's fp16/bf16: fp32 state only;
//                                 its reference is the CPU's fp32 update: it has no other)
//   exact ops  (exact_checks.cc)  casts, adds, division, dropout masks: byte-identical to CpuOps; reductions
//                                 within fp32 tolerance of CpuOps
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
  int offset = 0;  // the op-case table's float tensors start this many elements past their alignment
  // The op-case table's dtype ("fp32", "fp16" or "bf16"; empty: all three): scripts/gpu_check runs each in
  // its own process at 124M's shapes, where the CPU's fp64 reference of each dtype takes up to a minute.
  std::string dtype;
  int64_t N() const { return int64_t(B) * T; }
};

inline constexpr double kF32Tolerance = 1e-5;

// One row per compared byte buffer; `extra` joins the error text (e.g. a flag that differs).
void add_bytes_row(Table& table, const std::string& op, const std::string& dtype, const std::string& shape,
                   const std::vector<uint8_t>& cpu, const std::vector<uint8_t>& gpu, bool extra_ok = true,
                   const std::string& extra = "");

using CheckFunction = void (*)(Table&, Backends&, const Shapes&);
struct NamedCheck {
  const char* name;
  CheckFunction run;
};

// The op-case table's cases of one family (kernels/cases: families()).
void check_cases(Table& table, Backends& backends, const Shapes& s, const std::string& family);
void check_elementwise(Table& table, Backends& backends, const Shapes& s);
void check_dropout(Table& table, Backends& backends, const Shapes& s);
void check_reductions(Table& table, Backends& backends, const Shapes& s);
void check_quantizers(Table& table, Backends& backends, const Shapes& s);

// In table order.
inline const std::vector<NamedCheck>& all_checks() {
  static const std::vector<NamedCheck> checks = {
      {"embedding", [](Table& t, Backends& b, const Shapes& s) { check_cases(t, b, s, "embedding"); }},
      {"layernorm", [](Table& t, Backends& b, const Shapes& s) { check_cases(t, b, s, "layernorm"); }},
      {"linear", [](Table& t, Backends& b, const Shapes& s) { check_cases(t, b, s, "linear"); }},
      {"attention", [](Table& t, Backends& b, const Shapes& s) { check_cases(t, b, s, "attention"); }},
      {"gelu", [](Table& t, Backends& b, const Shapes& s) { check_cases(t, b, s, "gelu"); }},
      {"cross_entropy",
       [](Table& t, Backends& b, const Shapes& s) { check_cases(t, b, s, "cross_entropy"); }},
      {"classifier", [](Table& t, Backends& b, const Shapes& s) { check_cases(t, b, s, "classifier"); }},
      {"elementwise", check_elementwise},
      {"dropout", check_dropout},
      {"reductions", check_reductions},
      {"adamw", [](Table& t, Backends& b, const Shapes& s) { check_cases(t, b, s, "adamw"); }},
      {"quantizers", check_quantizers},
  };
  return checks;
}

}  // namespace gpt::gpu_check
