// Runs the op cases of op_cases.h on any backend, in three modes:
//   compare   the case on the backend in one dtype, against the CPU backend computing it in fp64 from the
//             same starting values (rounded to the dtype, so only the op's own error is measured)
//   gradient  a forward/backward pair in fp64 against central finite differences (a backend without fp64
//             answers "not supported")
//   time      the median milliseconds of the case's run
// A backend that throws UnsupportedOp (kernels/ops.h) gives a "not supported" result, never a pass.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cases/op_cases.h"

namespace gpt::cases {

// The dtype a case's float tensors take, and its tolerance: the case's own for fp32; fp16 and bf16 add
// their rounding of every value an op writes.
struct Variant {
  const char* label;
  DType dtype;
  // What GEMMs (and CUDA attention) over fp32 tensors round their inputs to (Ops::set_matmul_inputs): the
  // fp32 layer loop with --bf16 on a GPU. The rows then take that dtype's tolerance.
  DType matmul_inputs = DType::kF32;
};
inline constexpr Variant kFp32{"fp32", DType::kF32};
inline constexpr Variant kFp16{"fp16", DType::kF16};
inline constexpr Variant kBf16{"bf16", DType::kBF16};
inline constexpr Variant kFloatVariants[] = {kFp32, kFp16, kBf16};
inline constexpr Variant kFp32Bf16Inputs{"fp32-bf16", DType::kF32, DType::kBF16};
inline constexpr Variant kFp64{"fp64", DType::kF64};  // the gradient mode's
double tolerance(const OpCase& c, const Variant& v);

enum class Verdict { kPass, kFail, kUnsupported };
const char* verdict_name(Verdict v);  // "PASS", "FAIL", "not supported"

struct Result {
  std::string op;     // "layernorm_backward dx"
  std::string dtype;  // "fp32"
  std::string shape;  // the case's
  double error = 0;   // max |got - ref| / max |ref|, or the finite differences' relative error
  double tolerance = 0;
  Verdict verdict = Verdict::kFail;
  std::string message;  // why it failed or is not supported
};

// One result per compared output (one in all when the case could not run).
std::vector<Result> compare_to_reference(Ops& ops, const OpCase& c, const Variant& v);
// One result per (input, gradient) pair.
std::vector<Result> check_gradient(Ops& ops, const GradientCase& g);

struct Timing {
  double ms = 0;      // median over reps, after one warm-up run
  double gflops = 0;  // when the case counts its flops
};
Timing time_case(Ops& ops, const OpCase& c, int reps);

// max |got - ref| / max |ref| (the absolute difference where ref is all zeros); inf for any NaN or inf.
double max_relative_error(const std::vector<double>& ref, const std::vector<double>& got);

}  // namespace gpt::cases
