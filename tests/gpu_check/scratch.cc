// Twins on both backends; see scratch.h.
#include "tests/gpu_check/scratch.h"

#include <cstring>
#include <utility>

#include "kernels/common/random.h"

namespace gpt::gpu_check {

std::vector<float> normal_values(int64_t n, uint64_t seed, float scale) {
  std::vector<float> v(n);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) v[i] = float(random::normal(seed, uint64_t(i))) * scale;
  return v;
}

Scratch::Scratch(Backends& backends)
    : backends_(backends), gpu_arena_("cuda", Arena::kUnlimited, &backends.gpu.device_memory()) {}

Twin& Scratch::raw(std::vector<int64_t> shape, DType dtype, std::vector<uint8_t> bytes) {
  Twin t;
  t.cpu = cpu_arena_.allocate_tensor("twin", "gpu_check", shape, dtype);
  t.gpu = gpu_arena_.allocate_tensor("twin", "gpu_check", shape, dtype);
  bytes.resize(t.cpu.nbytes());
  t.init = std::move(bytes);
  twins_.push_back(std::move(t));
  reset(twins_.back(), false);
  reset(twins_.back(), true);
  return twins_.back();
}

Twin& Scratch::values(std::vector<int64_t> shape, const std::vector<float>& values) {
  std::vector<uint8_t> bytes(values.size() * sizeof(float));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return raw(std::move(shape), DType::kF32, std::move(bytes));
}

Twin& Scratch::random(std::vector<int64_t> shape, uint64_t seed, float scale) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return values(std::move(shape), normal_values(n, seed, scale));
}

Twin& Scratch::tokens(std::vector<int64_t> shape, int vocab, uint64_t seed) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<int32_t> ids(n);
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t r = random::bits(seed, uint64_t(i));
    ids[i] = int32_t((r & 1) ? (r >> 8) % 64 : (r >> 8) % uint64_t(vocab));
  }
  std::vector<uint8_t> bytes(n * sizeof(int32_t));
  std::memcpy(bytes.data(), ids.data(), bytes.size());
  return raw(std::move(shape), DType::kI32, std::move(bytes));
}

void Scratch::reset(const Twin& t, bool gpu_side) {
  backends_.on(gpu_side).upload(t.on(gpu_side), t.init.data());
}

void Scratch::round_on_gpu(const Twin& t, DType half) {
  Tensor narrow = gpu_arena_.allocate_tensor("rounded", "gpu_check", t.gpu.shape, half);
  backends_.gpu.cast(narrow, t.gpu, 1.0f);
  backends_.gpu.cast(t.gpu, narrow, 1.0f);
  backends_.gpu.synchronize();
  gpu_arena_.release(narrow.data);
}

std::vector<uint8_t> Scratch::bytes(const Twin& t, bool gpu_side) {
  std::vector<uint8_t> out(t.on(gpu_side).nbytes());
  backends_.on(gpu_side).download(out.data(), t.on(gpu_side));
  return out;
}

std::vector<float> Scratch::floats(const Twin& t, bool gpu_side) {
  std::vector<float> out(t.on(gpu_side).numel());
  backends_.on(gpu_side).download(out.data(), t.on(gpu_side));
  return out;
}

}  // namespace gpt::gpu_check
