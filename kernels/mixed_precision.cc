// The mixed-precision contract's dtype check; see mixed_precision.h.
#include "kernels/mixed_precision.h"

#include <string>

#include "kernels/ops.h"

namespace gpt {
namespace {

// "out bf16, x f16, mean f32" over the non-empty tensors of a list.
void describe_dtypes(std::string& text, std::initializer_list<Named> tensors) {
  for (const Named& n : tensors) {
    if (n.tensor.empty()) continue;
    text += (text.empty() ? "" : ", ") + std::string(n.name) + " " + dtype_name(n.tensor.dtype);
  }
}

std::string names(std::initializer_list<Named> tensors) {
  std::string text;
  for (const Named& n : tensors) text += (text.empty() ? "" : ", ") + std::string(n.name);
  return text;
}

}  // namespace

DType check_mixed_dtypes(const char* backend, const char* op, std::initializer_list<Named> compute,
                         std::initializer_list<Named> fp32) {
  DType t = DType::kF32;
  for (const Named& n : compute) {
    if (n.tensor.empty()) continue;
    t = n.tensor.dtype;
    break;
  }
  bool ok = t == DType::kF32 || is_half(t);
  for (const Named& n : compute) ok = ok && (n.tensor.empty() || n.tensor.dtype == t);
  for (const Named& n : fp32) ok = ok && (n.tensor.empty() || n.tensor.dtype == DType::kF32);
  if (ok) return t;
  std::string got;
  describe_dtypes(got, compute);
  describe_dtypes(got, fp32);
  std::string want = names(compute) + " in one of f32, f16, bf16";
  if (fp32.size() > 0) want += "; " + names(fp32) + " f32";
  throw UnsupportedOp(std::string(backend) + "::" + op + ": dtypes " + got + " (want " + want + ")");
}

}  // namespace gpt
