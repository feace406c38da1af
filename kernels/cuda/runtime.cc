// Runtime pieces of the CUDA backend that need no device code: error checks, the device probe, Context,
// DeviceBuffer and the arena's device block source. Compiled by the host compiler against the CUDA runtime.
#include "kernels/cuda/runtime.h"

#include <cstdio>
#include <new>
#include <utility>

namespace gpt::cuda {

void check(cudaError_t status, const char* call, const char* file, int line) {
  if (status == cudaSuccess) return;
  cudaGetLastError();  // clear a non-sticky error so later calls are not blamed for it
  throw CudaError(std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " +
                  cudaGetErrorName(status) + ": " + cudaGetErrorString(status));
}

void check(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw CudaError(std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " +
                  cublasGetStatusName(status) + ": " + cublasGetStatusString(status));
}

DeviceProbe probe_devices() {
  DeviceProbe probe;
  const cudaError_t status = cudaGetDeviceCount(&probe.count);
  if (status != cudaSuccess) {
    cudaGetLastError();
    probe.count = 0;
    probe.problem =
        std::string("cudaGetDeviceCount: ") + cudaGetErrorName(status) + ": " + cudaGetErrorString(status);
  } else if (probe.count == 0) {
    probe.problem = "cudaGetDeviceCount reports 0 devices";
  }
  return probe;
}

std::string DeviceInfo::describe() const {
  char text[256];
  std::snprintf(text, sizeof text, "%s (sm_%d%d, %d SMs, %s)", name.c_str(), major, minor, multiprocessors,
                format_bytes(memory_bytes).c_str());
  return text;
}

Context::Context(int device) {
  DeviceProbe probe = probe_devices();
  if (probe.count == 0) throw CudaError("no CUDA device is present (" + probe.problem + ")");
  if (device < 0 || device >= probe.count) {
    throw CudaError("CUDA device " + std::to_string(device) + " does not exist: the driver reports " +
                    std::to_string(probe.count) + " device(s), numbered from 0");
  }
  GPT_CUDA_CHECK(cudaSetDevice(device));
  cudaDeviceProp props{};
  GPT_CUDA_CHECK(cudaGetDeviceProperties(&props, device));
  info_ = DeviceInfo{
      device, props.name, props.major, props.minor, props.multiProcessorCount, props.totalGlobalMem};
  if (props.major < 8) {
    throw CudaError("CUDA device " + std::to_string(device) + " is " + info_.describe() +
                    "; this build carries code for sm_80 and sm_90 (Ampere, Hopper) and newer");
  }
  GPT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  GPT_CUDA_CHECK(cublasCreate(&cublas_));
  GPT_CUDA_CHECK(cublasSetStream(cublas_, stream_));
  GPT_CUDA_CHECK(cublasLtCreate(&cublaslt_));
  GPT_CUDA_CHECK(cudaMalloc(&workspace_, kWorkspaceBytes));
}

Context::~Context() {
  // Destructors must not throw; a failure here is reported by the next call that checks. The workspace may
  // still be in use by enqueued GEMMs: cudaFree waits for the device before releasing it.
  if (workspace_) cudaFree(workspace_);
  if (cublaslt_) cublasLtDestroy(cublaslt_);
  if (cublas_) cublasDestroy(cublas_);
  if (stream_) cudaStreamDestroy(stream_);
}

void Context::synchronize() const {
  GPT_CUDA_CHECK(cudaStreamSynchronize(stream_));
  GPT_CUDA_CHECK(cudaGetLastError());
}

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  GPT_CUDA_CHECK(cudaMalloc(&data_, bytes));
  GPT_CUDA_CHECK(cudaMemset(data_, 0, bytes));
  GPT_CUDA_CHECK(
      cudaDeviceSynchronize());  // the memset runs on stream 0, which other streams do not wait for
}

DeviceBuffer::~DeviceBuffer() {
  if (data_) cudaFree(data_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (data_) cudaFree(data_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void DeviceBuffer::copy_from_host(const Context& ctx, const void* host, size_t bytes) {
  if (bytes > bytes_) {
    throw CudaError("DeviceBuffer::copy_from_host: " + std::to_string(bytes) + " bytes into a buffer of " +
                    std::to_string(bytes_));
  }
  GPT_CUDA_CHECK(cudaMemcpyAsync(data_, host, bytes, cudaMemcpyHostToDevice, ctx.stream()));
  ctx.synchronize();
}

void DeviceBuffer::copy_to_host(const Context& ctx, void* host, size_t bytes) const {
  if (bytes > bytes_) {
    throw CudaError("DeviceBuffer::copy_to_host: " + std::to_string(bytes) + " bytes from a buffer of " +
                    std::to_string(bytes_));
  }
  GPT_CUDA_CHECK(cudaMemcpyAsync(host, data_, bytes, cudaMemcpyDeviceToHost, ctx.stream()));
  ctx.synchronize();
}

void* DeviceBlockSource::acquire(size_t bytes) {
  void* block = nullptr;
  const cudaError_t status = cudaMalloc(&block, bytes);
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    throw std::bad_alloc();
  }
  GPT_CUDA_CHECK(status);
  GPT_CUDA_CHECK(cudaMemset(block, 0, bytes));
  GPT_CUDA_CHECK(cudaDeviceSynchronize());  // see DeviceBuffer: stream 0 is not ordered with other streams
  return block;
}

void DeviceBlockSource::release(void* block, size_t /*bytes*/) {
  cudaFree(block);
}

StreamScratch::StreamScratch(const Context& ctx, size_t bytes) : stream_(ctx.stream()) {
  GPT_CUDA_CHECK(cudaMallocAsync(&data_, bytes, stream_));
}

StreamScratch::~StreamScratch() {
  if (data_) cudaFreeAsync(data_, stream_);
}

}  // namespace gpt::cuda
