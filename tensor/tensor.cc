// Tensor and Buffer: sizes, names, aligned zeroed host allocation.
#include "tensor/tensor.h"

#include <sstream>
#include <stdexcept>

#include "tensor/host_pages.h"

namespace gpt {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 4;
    case DType::kF16:
      return 2;
    case DType::kBF16:
      return 2;
    case DType::kI8:
      return 1;
    case DType::kF64:
      return 8;
    case DType::kI32:
      return 4;
    case DType::kI4:
      break;
  }
  throw std::invalid_argument(std::string("dtype_size: ") + dtype_name(dtype) +
                              " packs two elements per byte; use dtype_bytes");
}

size_t dtype_bytes(DType dtype, int64_t n) {
  if (dtype == DType::kI4) return static_cast<size_t>((n + 1) / 2);
  return static_cast<size_t>(n) * dtype_size(dtype);
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "f32";
    case DType::kF16:
      return "f16";
    case DType::kBF16:
      return "bf16";
    case DType::kI8:
      return "i8";
    case DType::kF64:
      return "f64";
    case DType::kI32:
      return "i32";
    case DType::kI4:
      return "i4";
  }
  return "?";
}

const char* device_name(Device device) {
  return device == Device::kCPU ? "cpu" : "cuda";
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string Tensor::describe() const {
  std::ostringstream out;
  out << dtype_name(dtype) << "[";
  for (size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << "] on " << device_name(device);
  return out.str();
}

void Buffer::Free::operator()(void* p) const {
  free_host(p, bytes);
}

Buffer::Buffer(size_t bytes) : data_(nullptr, Free{bytes}), bytes_(bytes) {
  if (bytes == 0) return;
  data_.reset(allocate_zeroed_host(bytes));
}

Tensor Buffer::view(std::vector<int64_t> shape, DType dtype) const {
  Tensor t{data(), std::move(shape), dtype, Device::kCPU};
  if (t.nbytes() > bytes_) {
    throw std::length_error("Buffer::view: " + t.describe() + " needs " + std::to_string(t.nbytes()) +
                            " bytes but the buffer holds " + std::to_string(bytes_));
  }
  return t;
}

}  // namespace gpt
