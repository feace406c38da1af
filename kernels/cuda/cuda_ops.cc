// CudaOps: the device seam on one GPU; see cuda_ops.h.
#include "kernels/cuda/cuda_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/gelu.h"
#include "kernels/cuda/linear.h"
#include "kernels/cuda/ops_internal.h"

namespace gpt::cuda {

void* CountedDeviceMemory::acquire(size_t bytes) {
  void* block = memory_.acquire(bytes);
  std::lock_guard<std::mutex> lock(mutex_);
  held_ += bytes;
  peak_ = std::max(peak_, held_);
  return block;
}

void CountedDeviceMemory::release(void* block, size_t bytes) {
  memory_.release(block, bytes);
  std::lock_guard<std::mutex> lock(mutex_);
  held_ -= bytes;
}

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
  // Kernels still queued may read or write this block (wire memory is mapped into the device): wait for them.
  GPT_CUDA_CHECK(cudaDeviceSynchronize());
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = retired_.find(block); it != retired_.end()) {
      GPT_CUDA_CHECK(cudaEventDestroy(it->second));
      retired_.erase(it);
    }
  }
  GPT_CUDA_CHECK(cudaFreeHost(block));
}

PinnedBlockSource::~PinnedBlockSource() {
  for (const auto& [block, event] : retired_) cudaEventDestroy(event);  // destructors do not throw
}

void PinnedBlockSource::retire(void* block, size_t) {
  std::lock_guard<std::mutex> lock(mutex_);
  cudaEvent_t& event = retired_[block];
  if (!event) GPT_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  GPT_CUDA_CHECK(cudaEventRecord(event, context_.stream()));
}

void PinnedBlockSource::reuse(void* block, size_t bytes) {
  cudaEvent_t event = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = retired_.find(block); it != retired_.end()) event = it->second;
  }
  if (event) GPT_CUDA_CHECK(cudaEventSynchronize(event));  // usually long done: the last step's work
  std::memset(block, 0, bytes);
}

void DeviceWireMemory::reuse(void* block, size_t bytes) {
  GPT_CUDA_CHECK(cudaMemsetAsync(block, 0, bytes, context_.stream()));
}

BlockSource& CudaOps::wire_memory() {
  wire_handed_out_ = true;
  if (wire_on_device_) return device_wire_memory_;
  return wire_memory_;
}

void CudaOps::keep_wire_memory_on_device() {
  if (wire_handed_out_ && !wire_on_device_)
    throw std::logic_error("CudaOps: wire memory moved to the device after it was handed out");
  wire_on_device_ = true;
}

void CudaOps::upload(const Tensor& dst, const void* host) {
  GPT_CUDA_CHECK(cudaMemcpyAsync(dst.data, host, dst.nbytes(), cudaMemcpyDefault, context_.stream()));
  context_.synchronize();  // the host buffer may be reused as soon as this returns
}

void CudaOps::download(void* host, const Tensor& src) {
  GPT_CUDA_CHECK(cudaMemcpyAsync(host, src.data, src.nbytes(), cudaMemcpyDefault, context_.stream()));
  context_.synchronize();
}

void CudaOps::set_matmul_inputs(DType inputs) {
  context_.set_fp32_gemm_compute(inputs == DType::kBF16  ? CUBLAS_COMPUTE_32F_FAST_16BF
                                 : inputs == DType::kF16 ? CUBLAS_COMPUTE_32F_FAST_16F
                                                         : CUBLAS_COMPUTE_32F);
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

// The layer ops below take the mixed-precision contract of kernels/ops.h: linear, GELU and add dispatch to
// their kernels templated on the storage type.
void CudaOps::linear_forward(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& b) {
  const DType dtype = check_dtypes("linear_forward", {{"x", x}, {"w", w}, {"b", b}, {"out", out}});
  const int OC = int(w.shape[0]), IC = int(w.shape[1]);
  on_compute_dtype(dtype, [&]<typename T>() {
    cuda::linear_forward<T>(context_, typed<T>(out), typed<T>(x), typed<T>(w), typed<T>(b),
                            int(x.numel() / IC), IC, OC);
  });
}

void CudaOps::linear_backward(const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& dout,
                              const Tensor& x, const Tensor& w) {
  const DType dtype = check_dtypes("linear_backward", {{"x", x}, {"w", w}, {"dout", dout}, {"dx", dx}},
                                   {{"dw", dw}, {"db", db}});
  const int OC = int(w.shape[0]), IC = int(w.shape[1]);
  on_compute_dtype(dtype, [&]<typename T>() {
    cuda::linear_backward<T>(context_, typed<T>(dx), typed<float>(dw), typed<float>(db), typed<T>(dout),
                             typed<T>(x), typed<T>(w), int(x.numel() / IC), IC, OC);
  });
}

void CudaOps::linear_gelu_forward(const Tensor& out, const Tensor& pre, const Tensor& x, const Tensor& w,
                                  const Tensor& b) {
  const DType dtype =
      check_dtypes("linear_gelu_forward", {{"x", x}, {"w", w}, {"b", b}, {"pre", pre}, {"out", out}});
  const int OC = int(w.shape[0]), IC = int(w.shape[1]);
  on_compute_dtype(dtype, [&]<typename T>() {
    cuda::linear_gelu_forward<T>(context_, typed<T>(out), typed<T>(pre), typed<T>(x), typed<T>(w),
                                 typed<T>(b), int(x.numel() / IC), IC, OC);
  });
}

void CudaOps::gelu_forward(const Tensor& out, const Tensor& x) {
  const DType dtype = check_dtypes("gelu_forward", {{"x", x}, {"out", out}});
  on_compute_dtype(
      dtype, [&]<typename T>() { cuda::gelu_forward<T>(context_, typed<T>(out), typed<T>(x), x.numel()); });
}

void CudaOps::gelu_backward(const Tensor& dx, const Tensor& x, const Tensor& dout) {
  const DType dtype = check_dtypes("gelu_backward", {{"x", x}, {"dout", dout}, {"dx", dx}});
  on_compute_dtype(dtype, [&]<typename T>() {
    cuda::gelu_backward<T>(context_, typed<T>(dx), typed<T>(x), typed<T>(dout), x.numel());
  });
}

void CudaOps::add(const Tensor& out, const Tensor& a, const Tensor& b) {
  const DType dtype = check_dtypes("add", {{"a", a}, {"b", b}, {"out", out}});
  on_compute_dtype(dtype, [&]<typename T>() {
    cuda::add<T>(context_, typed<T>(out), typed<T>(a), typed<T>(b), a.numel());
  });
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
  } else if (dst.dtype == src.dtype && (dst.dtype == DType::kF16 || dst.dtype == DType::kBF16) &&
             scale == 1.0f) {
    copy(dst, src);
  } else {
    throw CudaError("CudaOps::cast: " + src.describe() + " into " + dst.describe() +
                    " is not a cast it makes");
  }
}

}  // namespace gpt::cuda
