// The plain tensor of the runtime: a data pointer with a shape, a dtype and a device, and the owning
// buffer that backs it. Kernels take raw pointers; Tensor is how buffers are described and handed around.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace gpt {

// The one dtype enum: model state and activations (fp64 for the gradient checks, fp32; fp16 and bf16 for
// compute weights and the wire), tokens (i32), and quantized payloads (int8, int4 packed two to a byte, low
// nibble first).
enum class DType : uint8_t { kF32, kF16, kBF16, kI8, kF64, kI32, kI4 };
enum class Device : uint8_t { kCPU, kCUDA };

// Bytes per element of a whole-byte dtype (throws std::invalid_argument for kI4, which packs two per byte).
size_t dtype_size(DType dtype);
// Bytes of n elements of any dtype (int4: ceil(n / 2)).
size_t dtype_bytes(DType dtype, int64_t n);
const char* dtype_name(DType dtype);
const char* device_name(Device device);

// A non-owning view: the memory belongs to a Buffer, an arena, or the caller.
struct Tensor {
  void* data = nullptr;
  std::vector<int64_t> shape;
  DType dtype = DType::kF32;
  Device device = Device::kCPU;

  int64_t numel() const;
  size_t nbytes() const { return dtype_bytes(dtype, numel()); }
  std::string describe() const;  // e.g. "f32[4, 768] on cpu"

  template <typename T>
  T* as() const {
    return static_cast<T*>(data);
  }
  bool empty() const { return data == nullptr; }
};

// The dtype of a C++ element type (float, double, int32_t, uint16_t is not one: fp16 and bf16 share it).
template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::kF32;
}
template <>
constexpr DType dtype_of<double>() {
  return DType::kF64;
}
template <>
constexpr DType dtype_of<int32_t>() {
  return DType::kI32;
}

// Owning, 64-byte aligned, zero-initialized host memory. Move-only.
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(size_t bytes);
  Buffer(Buffer&&) noexcept = default;
  Buffer& operator=(Buffer&&) noexcept = default;

  void* data() const { return data_.get(); }
  size_t size() const { return bytes_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_.get());
  }
  Tensor view(std::vector<int64_t> shape, DType dtype) const;  // checks that the view fits

 private:
  struct Free {
    size_t bytes = 0;  // what free_host needs back
    void operator()(void* p) const;
  };
  std::unique_ptr<void, Free> data_;
  size_t bytes_ = 0;
};

}  // namespace gpt
