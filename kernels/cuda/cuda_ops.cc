// CudaOps: the device seam on one GPU; see cuda_ops.h.
#include "kernels/cuda/cuda_ops.h"

#include <cmath>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/gelu.h"
#include "kernels/cuda/linear.h"

namespace gpt::cuda {
namespace {

[[noreturn]] void not_yet(const char* op) {
  throw CudaError(
      std::string("CudaOps::") + op +
      " is not implemented in the CUDA backend yet; run on the CPU backend (the default) meanwhile");
}

float* f32(const Tensor& t, const char* op) {
  if (t.dtype != DType::kF32)
    throw CudaError(std::string("CudaOps::") + op + ": expected f32, got " + t.describe());
  return static_cast<float*>(t.data);
}

uint16_t* bits16(const Tensor& t) {
  return static_cast<uint16_t*>(t.data);
}

}  // namespace

void* PinnedBlockSource::acquire(size_t bytes) {
  void* block = nullptr;
  const cudaError_t status = cudaHostAlloc(&block, bytes, cudaHostAllocMapped);
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    throw std::bad_alloc();
  }
  GPT_CUDA_CHECK(status);
  std::memset(block, 0, bytes);
  return block;
}

void PinnedBlockSource::release(void* block, size_t) {
  GPT_CUDA_CHECK(cudaFreeHost(block));
}

void CudaOps::upload(const Tensor& dst, const void* host) {
  GPT_CUDA_CHECK(cudaMemcpyAsync(dst.data, host, dst.nbytes(), cudaMemcpyDefault, context_.stream()));
  context_.synchronize();  // the host buffer may be reused as soon as this returns
}

void CudaOps::download(void* host, const Tensor& src) {
  GPT_CUDA_CHECK(cudaMemcpyAsync(host, src.data, src.nbytes(), cudaMemcpyDefault, context_.stream()));
  context_.synchronize();
}

void CudaOps::copy(const Tensor& dst, const Tensor& src) {
  if (dst.nbytes() != src.nbytes())
    throw CudaError("CudaOps::copy: " + src.describe() + " into " + dst.describe());
  GPT_CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, dst.nbytes(), cudaMemcpyDefault, context_.stream()));
}

void CudaOps::fill(const Tensor& t, double value) {
  if (value == 0.0) {
    GPT_CUDA_CHECK(cudaMemsetAsync(t.data, 0, t.nbytes(), context_.stream()));
  } else {
    fill_f32(context_, f32(t, "fill"), float(value), t.numel());
  }
}

void CudaOps::linear_forward(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& b) {
  const int OC = int(w.shape[0]), IC = int(w.shape[1]);
  cuda::linear_forward<float>(context_, f32(out, "linear_forward"), f32(x, "linear_forward"),
                              f32(w, "linear_forward"), static_cast<const float*>(b.data),
                              int(x.numel() / IC), IC, OC);
}

void CudaOps::linear_backward(const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& dout,
                              const Tensor& x, const Tensor& w) {
  const int OC = int(w.shape[0]), IC = int(w.shape[1]);
  cuda::linear_backward<float>(context_, static_cast<float*>(dx.data), f32(dw, "linear_backward"),
                               static_cast<float*>(db.data), f32(dout, "linear_backward"),
                               f32(x, "linear_backward"), f32(w, "linear_backward"), int(x.numel() / IC), IC,
                               OC);
}

void CudaOps::gelu_forward(const Tensor& out, const Tensor& x) {
  cuda::gelu_forward<float>(context_, f32(out, "gelu_forward"), f32(x, "gelu_forward"), x.numel());
}

void CudaOps::gelu_backward(const Tensor& dx, const Tensor& x, const Tensor& dout) {
  cuda::gelu_backward<float>(context_, f32(dx, "gelu_backward"), f32(x, "gelu_backward"),
                             f32(dout, "gelu_backward"), x.numel());
}

void CudaOps::add(const Tensor& out, const Tensor& a, const Tensor& b) {
  add_f32(context_, f32(out, "add"), f32(a, "add"), f32(b, "add"), a.numel());
}

void CudaOps::add_into(const Tensor& dst, const Tensor& src) {
  add_into_f32(context_, f32(dst, "add_into"), f32(src, "add_into"), dst.numel());
}

void CudaOps::cast(const Tensor& dst, const Tensor& src, float scale) {
  const int64_t n = src.numel();
  if (src.dtype == DType::kF32 && dst.dtype == DType::kF32) {
    f32_scaled(context_, f32(dst, "cast"), f32(src, "cast"), scale, n);
  } else if (src.dtype == DType::kF32 && dst.dtype == DType::kF16) {
    f32_to_f16_scaled(context_, bits16(dst), f32(src, "cast"), scale, n);
  } else if (src.dtype == DType::kF32 && dst.dtype == DType::kBF16) {
    f32_to_bf16_scaled(context_, bits16(dst), f32(src, "cast"), scale, n);
  } else if (dst.dtype == DType::kF32 && src.dtype == DType::kF16 && scale == 1.0f) {
    f16_to_f32(context_, f32(dst, "cast"), bits16(src), n);
  } else if (dst.dtype == DType::kF32 && src.dtype == DType::kBF16 && scale == 1.0f) {
    bf16_to_f32(context_, f32(dst, "cast"), bits16(src), n);
  } else {
    throw CudaError("CudaOps::cast: " + src.describe() + " into " + dst.describe() +
                    " is not a cast it makes");
  }
}

// The reductions go through the host for now: exact, in the CPU backend's order, but a copy of the tensor.
double CudaOps::sum(const Tensor& x) {
  std::vector<float> host(size_t(x.numel()));
  f32(x, "sum");
  download(host.data(), x);
  double total = 0;
  for (float v : host) total += double(v);
  return total;
}

double CudaOps::sum_of_squares(const Tensor& x) {
  std::vector<float> host(size_t(x.numel()));
  f32(x, "sum_of_squares");
  download(host.data(), x);
  // Fixed-size chunks summed in a fixed order, as the CPU backend does.
  constexpr size_t kChunk = 1 << 14;
  double total = 0;
  for (size_t begin = 0; begin < host.size(); begin += kChunk) {
    double chunk = 0;
    for (size_t i = begin; i < std::min(host.size(), begin + kChunk); ++i)
      chunk += double(host[i]) * double(host[i]);
    total += chunk;
  }
  return total;
}

bool CudaOps::all_finite(const Tensor& x) {
  std::vector<float> host(size_t(x.numel()));
  f32(x, "all_finite");
  download(host.data(), x);
  for (float v : host) {
    if (!std::isfinite(v)) return false;
  }
  return true;
}

void CudaOps::embedding_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  not_yet("embedding_forward");
}
void CudaOps::embedding_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  not_yet("embedding_backward");
}
void CudaOps::layernorm_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                const Tensor&) {
  not_yet("layernorm_forward");
}
void CudaOps::layernorm_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                 const Tensor&, const Tensor&, const Tensor&) {
  not_yet("layernorm_backward");
}
void CudaOps::attention_forward(const Tensor&, const Tensor&, const Tensor&, const DropoutMask*) {
  not_yet("attention_forward");
}

void CudaOps::attention_decode(const Tensor&, const Tensor&, const Tensor&) {
  not_yet("attention_decode");
}
void CudaOps::attention_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                 const DropoutMask*) {
  not_yet("attention_backward");
}
void CudaOps::dropout_forward(const Tensor&, const Tensor&, const DropoutMask&) {
  not_yet("dropout_forward");
}
void CudaOps::dropout_backward(const Tensor&, const Tensor&, const DropoutMask&) {
  not_yet("dropout_backward");
}
void CudaOps::cross_entropy_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, int) {
  not_yet("cross_entropy_forward");
}
void CudaOps::cross_entropy_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, int) {
  not_yet("cross_entropy_backward");
}
void CudaOps::adamw(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const AdamWHyper&, int64_t,
                    float) {
  not_yet("adamw");
}
bool CudaOps::quantize(const Tensor&, const Tensor&, int64_t, int64_t, int, int) {
  not_yet("quantize");
}
bool CudaOps::quantize_with_feedback(const Tensor&, const Tensor&, const Tensor&, int64_t, int64_t, int, int,
                                     float) {
  not_yet("quantize_with_feedback");
}
void CudaOps::dequantize(const Tensor&, const Tensor&, int64_t, int64_t, int, int, DType) {
  not_yet("dequantize");
}

void CudaOps::dequantize_add(const Tensor&, const Tensor&, int64_t, int64_t, int, int) {
  not_yet("dequantize_add");
}
void CudaOps::divide(const Tensor&, float) {
  not_yet("divide");
}

}  // namespace gpt::cuda
