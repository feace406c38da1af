// The CUDA backend's runtime: asking whether a usable device exists, one Context per device (its stream,
// cuBLAS and cuBLASLt handles, the cuBLASLt workspace), owning device memory, and every CUDA or cuBLAS
// failure turned into an exception whose message says what was called, where, and what the library answered.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <stdexcept>
#include <string>

#include "tensor/arena.h"

namespace gpt::cuda {

class CudaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throw CudaError("<call> failed at <file>:<line>: <error name>: <description>") unless the status is
// success.
void check(cudaError_t status, const char* call, const char* file, int line);
void check(cublasStatus_t status, const char* call, const char* file, int line);
#define GPT_CUDA_CHECK(call) ::gpt::cuda::check((call), #call, __FILE__, __LINE__)

// How many devices the driver reports; `problem` says why there are none (no driver, no device, ...).
// Never throws, so a program can print one clear line and exit.
struct DeviceProbe {
  int count = 0;
  std::string problem;  // e.g. "cudaGetDeviceCount: cudaErrorNoDevice: no CUDA-capable device is detected"
};
DeviceProbe probe_devices();

struct DeviceInfo {
  int index = 0;
  std::string name;
  int major = 0;  // compute capability
  int minor = 0;
  int multiprocessors = 0;
  size_t memory_bytes = 0;
  std::string describe() const;  // "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, 79.1 GiB)"
};

// What the kernels of one device need: the device made current, a non-blocking stream, a cuBLAS handle bound
// to that stream, a cuBLASLt handle (cuBLASLt takes the stream per call) and the workspace cuBLASLt may use
// for split-K and epilogue scratch, allocated once. Kernels enqueue on stream() and return without waiting;
// synchronize() waits and surfaces asynchronous errors. One Context per device per process (one rank drives
// one GPU). Everything that uses the workspace runs on stream(), so consecutive users cannot overlap.
class Context {
 public:
  explicit Context(int device = 0);  // throws CudaError naming the device and the problem
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  const DeviceInfo& info() const { return info_; }
  cudaStream_t stream() const { return stream_; }
  cublasHandle_t cublas() const { return cublas_; }
  cublasLtHandle_t cublaslt() const { return cublaslt_; }
  // 32 MiB, what NVIDIA recommends for cuBLASLt on Hopper; the GEMM heuristics are told the size and pick
  // only algorithms whose scratch fits. Kernels between GEMMs may use it as scratch too (linear's bias
  // gradient keeps its partial sums there): stream order keeps them apart.
  static constexpr size_t kWorkspaceBytes = size_t(32) << 20;
  void* workspace() const { return workspace_; }
  size_t workspace_bytes() const { return kWorkspaceBytes; }
  // The compute type of GEMMs whose inputs are stored in fp32 (CudaOps::set_matmul_inputs):
  // CUBLAS_COMPUTE_32F (exact fp32, never TF32) unless asked for tensor cores (CUBLAS_COMPUTE_32F_FAST_16BF
  // or _16F: inputs rounded to bf16 or fp16 inside the GEMM, fp32 accumulation). GEMMs on fp16/bf16 storage
  // ignore it.
  cublasComputeType_t fp32_gemm_compute() const { return fp32_gemm_compute_; }
  void set_fp32_gemm_compute(cublasComputeType_t compute) { fp32_gemm_compute_ = compute; }
  void synchronize() const;

 private:
  DeviceInfo info_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  cublasLtHandle_t cublaslt_ = nullptr;
  void* workspace_ = nullptr;
  cublasComputeType_t fp32_gemm_compute_ = CUBLAS_COMPUTE_32F;
};

// Owning device memory (cudaMalloc, zero-filled before the constructor returns), move-only, with copies for
// setup and tests. The copies run on the context's stream and wait for it, so they are ordered after every
// kernel already enqueued there (a plain cudaMemcpy would not be: the stream does not sync with stream 0).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  size_t size() const { return bytes_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  void copy_from_host(const Context& ctx, const void* host, size_t bytes);  // bytes <= size()
  void copy_to_host(const Context& ctx, void* host, size_t bytes) const;

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// Temporary device memory for one op: allocated and freed in stream order on the context's stream
// (cudaMallocAsync / cudaFreeAsync), so it is never handed back while a kernel queued to use it has yet to
// run, and the op never waits for the device to get it.
class StreamScratch {
 public:
  StreamScratch(const Context& ctx, size_t bytes);
  ~StreamScratch();  // must not throw: a failure surfaces at the next check
  StreamScratch(const StreamScratch&) = delete;
  StreamScratch& operator=(const StreamScratch&) = delete;
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  cudaStream_t stream_;
  void* data_ = nullptr;
};

// Waits for the context's stream and returns the device value at `value` (an op's result for the host).
template <typename T>
T read_back(const Context& ctx, const T* value) {
  T host{};
  GPT_CUDA_CHECK(cudaMemcpyAsync(&host, value, sizeof(T), cudaMemcpyDeviceToHost, ctx.stream()));
  ctx.synchronize();
  return host;
}

// Device memory for gpt::Arena, so long-lived GPU buffers get the same ledger as host ones.
class DeviceBlockSource final : public gpt::BlockSource {
 public:
  void* acquire(size_t bytes) override;  // throws std::bad_alloc when cudaMalloc fails for lack of memory
  void release(void* block, size_t bytes) override;
  Device device() const override { return Device::kCUDA; }
};

}  // namespace gpt::cuda
