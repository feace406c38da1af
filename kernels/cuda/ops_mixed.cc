// The mixed-precision contract of CudaOps' layer ops (see ops_internal.h): the dtype check and Widened, the
// fp32 scratch through which a kernel that takes fp32 only runs on fp16/bf16 tensors.
#include <string>

#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/ops_internal.h"

namespace gpt::cuda {
namespace {

bool is_compute_dtype(DType d) {
  return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16;
}

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

DType check_dtypes(const char* op, std::initializer_list<Named> compute, std::initializer_list<Named> fp32) {
  DType t = DType::kF32;
  for (const Named& n : compute) {
    if (n.tensor.empty()) continue;
    t = n.tensor.dtype;
    break;
  }
  bool ok = is_compute_dtype(t);
  for (const Named& n : compute) ok = ok && (n.tensor.empty() || n.tensor.dtype == t);
  for (const Named& n : fp32) ok = ok && (n.tensor.empty() || n.tensor.dtype == DType::kF32);
  if (ok) return t;
  std::string got;
  describe_dtypes(got, compute);
  describe_dtypes(got, fp32);
  std::string want = names(compute) + " in one of f32, f16, bf16";
  if (fp32.size() > 0) want += "; " + names(fp32) + " f32";
  throw UnsupportedOp(std::string("CudaOps::") + op + ": dtypes " + got + " (want " + want + ")");
}

float* Widened::at(const Tensor& t, bool read, bool written) {
  if (t.empty()) return nullptr;
  if (t.dtype == DType::kF32) return static_cast<float*>(t.data);
  if (t.dtype != DType::kF16 && t.dtype != DType::kBF16)
    throw UnsupportedOp("CudaOps: no fp32 scratch for " + t.describe());
  Entry* entry = nullptr;
  for (const auto& e : entries_) {
    if (e->tensor.data != t.data) continue;
    if (e->tensor.numel() != t.numel() || e->tensor.dtype != t.dtype)
      throw CudaError("CudaOps: " + t.describe() + " overlaps " + e->tensor.describe() + " in another shape");
    entry = e.get();
  }
  if (!entry) {
    entries_.push_back(std::make_unique<Entry>());
    entry = entries_.back().get();
    entry->tensor = t;
    entry->scratch = std::make_unique<StreamScratch>(ctx_, size_t(t.numel()) * sizeof(float));
  }
  float* wide = entry->scratch->as<float>();
  if (read && !entry->widened) {
    if (t.dtype == DType::kF16) {
      f16_to_f32(ctx_, wide, bits16(t), t.numel());
    } else {
      bf16_to_f32(ctx_, wide, bits16(t), t.numel());
    }
    entry->widened = true;
  }
  entry->written = entry->written || written;
  return wide;
}

void Widened::narrow() {
  for (const auto& e : entries_) {
    if (!e->written) continue;
    const Tensor& t = e->tensor;
    if (t.dtype == DType::kF16) {
      f32_to_f16_scaled(ctx_, bits16(t), e->scratch->as<float>(), 1.0f, t.numel());
    } else {
      f32_to_bf16_scaled(ctx_, bits16(t), e->scratch->as<float>(), 1.0f, t.numel());
    }
  }
}

}  // namespace gpt::cuda
