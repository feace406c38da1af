// The mixed-precision contract of CudaOps' layer ops (see ops_internal.h): Widened, the fp32 scratch through
// which a kernel that takes fp32 only runs on fp16/bf16 tensors.
#include <string>

#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/ops_internal.h"

namespace gpt::cuda {

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
