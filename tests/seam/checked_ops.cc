// CheckedOps: every op of the CPU backend, with device memory open only while it runs; see checked_ops.h.
#include "tests/seam/checked_ops.h"

#include <sys/mman.h>

#include <new>
#include <stdexcept>

namespace gpt::testing {

ProtectedMemory::~ProtectedMemory() {
  for (auto& [block, bytes] : blocks_) munmap(block, bytes);
}

void* ProtectedMemory::acquire(size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  // Fresh anonymous pages are zero-filled, as a BlockSource's blocks must be.
  void* block =
      mmap(nullptr, bytes, open_ ? PROT_READ | PROT_WRITE : PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (block == MAP_FAILED) throw std::bad_alloc();
  blocks_[block] = bytes;
  return block;
}

void ProtectedMemory::release(void* block, size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  blocks_.erase(block);
  munmap(block, bytes);
}

void ProtectedMemory::set_open(bool open) {
  std::lock_guard<std::mutex> lock(mutex_);
  open_ = open;
  for (auto& [block, bytes] : blocks_) {
    if (mprotect(block, bytes, open ? PROT_READ | PROT_WRITE : PROT_NONE) != 0)
      throw std::runtime_error("ProtectedMemory: mprotect failed");
  }
}

void CheckedOps::upload(const Tensor& dst, const void* host) {
  inside([&] { cpu_.upload(dst, host); });
}

void CheckedOps::download(void* host, const Tensor& src) {
  inside([&] { cpu_.download(host, src); });
}

void CheckedOps::copy(const Tensor& dst, const Tensor& src) {
  inside([&] { cpu_.copy(dst, src); });
}

void CheckedOps::fill(const Tensor& t, double value) {
  inside([&] { cpu_.fill(t, value); });
}

void CheckedOps::embedding_forward(const Tensor& out, const Tensor& tokens, const Tensor& wte,
                                   const Tensor& wpe) {
  inside([&] { cpu_.embedding_forward(out, tokens, wte, wpe); });
}

void CheckedOps::embedding_backward(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout,
                                    const Tensor& tokens) {
  inside([&] { cpu_.embedding_backward(dwte, dwpe, dout, tokens); });
}

void CheckedOps::layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                                   const Tensor& w, const Tensor& b) {
  inside([&] { cpu_.layernorm_forward(out, mean, rstd, x, w, b); });
}

void CheckedOps::layernorm_backward(const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& dout,
                                    const Tensor& x, const Tensor& w, const Tensor& mean,
                                    const Tensor& rstd) {
  inside([&] { cpu_.layernorm_backward(dx, dw, db, dout, x, w, mean, rstd); });
}

void CheckedOps::linear_forward(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& b) {
  inside([&] { cpu_.linear_forward(out, x, w, b); });
}

void CheckedOps::linear_backward(const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& dout,
                                 const Tensor& x, const Tensor& w) {
  inside([&] { cpu_.linear_backward(dx, dw, db, dout, x, w); });
}

void CheckedOps::attention_decode(const Tensor& out, const Tensor& att, const Tensor& qkv) {
  inside([&] { cpu_.attention_decode(out, att, qkv); });
}

void CheckedOps::attention_forward(const Tensor& out, const Tensor& att, const Tensor& qkv,
                                   const DropoutMask* dropout) {
  inside([&] { cpu_.attention_forward(out, att, qkv, dropout); });
}

void CheckedOps::attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                                    const Tensor& att, const DropoutMask* dropout) {
  inside([&] { cpu_.attention_backward(dqkv, dout, qkv, att, dropout); });
}

void CheckedOps::gelu_forward(const Tensor& out, const Tensor& x) {
  inside([&] { cpu_.gelu_forward(out, x); });
}

void CheckedOps::gelu_backward(const Tensor& dx, const Tensor& x, const Tensor& dout) {
  inside([&] { cpu_.gelu_backward(dx, x, dout); });
}

void CheckedOps::add(const Tensor& out, const Tensor& a, const Tensor& b) {
  inside([&] { cpu_.add(out, a, b); });
}

void CheckedOps::dropout_forward(const Tensor& out, const Tensor& x, const DropoutMask& mask) {
  inside([&] { cpu_.dropout_forward(out, x, mask); });
}

void CheckedOps::dropout_backward(const Tensor& dx, const Tensor& dout, const DropoutMask& mask) {
  inside([&] { cpu_.dropout_backward(dx, dout, mask); });
}

void CheckedOps::cross_entropy_forward(const Tensor& losses, const Tensor& probs, const Tensor& logits,
                                       const Tensor& targets, int vocab) {
  inside([&] { cpu_.cross_entropy_forward(losses, probs, logits, targets, vocab); });
}

void CheckedOps::cross_entropy_backward(const Tensor& dlogits, const Tensor& probs, const Tensor& targets,
                                        const Tensor& dlosses, int vocab) {
  inside([&] { cpu_.cross_entropy_backward(dlogits, probs, targets, dlosses, vocab); });
}

double CheckedOps::sum(const Tensor& x) {
  return inside([&] { return cpu_.sum(x); });
}

void CheckedOps::cast(const Tensor& dst, const Tensor& src, float scale) {
  inside([&] { cpu_.cast(dst, src, scale); });
}

void CheckedOps::add_into(const Tensor& dst, const Tensor& src) {
  inside([&] { cpu_.add_into(dst, src); });
}

double CheckedOps::sum_of_squares(const Tensor& x) {
  return inside([&] { return cpu_.sum_of_squares(x); });
}

bool CheckedOps::all_finite(const Tensor& x) {
  return inside([&] { return cpu_.all_finite(x); });
}

void CheckedOps::adamw(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                       const AdamWHyper& hyper, int64_t step, float grad_scale) {
  inside([&] { cpu_.adamw(param, grad, m, v, hyper, step, grad_scale); });
}

bool CheckedOps::quantize(const Tensor& out, const Tensor& x, int64_t slice_len, int64_t count, int bits,
                          int block) {
  return inside([&] { return cpu_.quantize(out, x, slice_len, count, bits, block); });
}

bool CheckedOps::quantize_with_feedback(const Tensor& out, const Tensor& x, const Tensor& error,
                                        int64_t slice_len, int64_t count, int bits, int block, float beta) {
  return inside(
      [&] { return cpu_.quantize_with_feedback(out, x, error, slice_len, count, bits, block, beta); });
}

void CheckedOps::dequantize(const Tensor& out, const Tensor& in, int64_t slice_len, int64_t count, int bits,
                            int block, DType round_to) {
  inside([&] { cpu_.dequantize(out, in, slice_len, count, bits, block, round_to); });
}

void CheckedOps::dequantize_add(const Tensor& acc, const Tensor& in, int64_t slice_len, int64_t count,
                                int bits, int block) {
  inside([&] { cpu_.dequantize_add(acc, in, slice_len, count, bits, block); });
}

void CheckedOps::divide(const Tensor& x, float divisor) {
  inside([&] { cpu_.divide(x, divisor); });
}

}  // namespace gpt::testing
