// CheckedOps: every op of the CPU backend, with device memory open only while it runs; see checked_ops.h.
#include "tests/seam/checked_ops.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <iterator>
#include <memory>
#include <new>
#include <stdexcept>

namespace gpt::testing {

namespace {

// Address space only (no memory is committed until a block is written): far more than any test's device
// memory.
constexpr size_t kReservedBytes = size_t(64) << 30;

size_t whole_pages(size_t bytes) {
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  return (std::max<size_t>(bytes, 1) + page - 1) / page * page;
}

// Fresh inaccessible zero pages at [at, at + bytes) (anywhere when at is null): the reservation, and a
// released block's range again.
char* map_closed(void* at, size_t bytes) {
  const int fixed = at ? MAP_FIXED : 0;
  void* got = mmap(at, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | fixed, -1, 0);
  if (got == MAP_FAILED || (at && got != at)) throw std::bad_alloc();
  return static_cast<char*>(got);
}

}  // namespace

ProtectedMemory::ProtectedMemory() : base_(map_closed(nullptr, kReservedBytes)) {
  free_[0] = kReservedBytes;
}

ProtectedMemory::~ProtectedMemory() {
  munmap(base_, kReservedBytes);
}

void* ProtectedMemory::acquire(size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  bytes = whole_pages(bytes);
  auto gap = std::find_if(free_.begin(), free_.end(), [&](const auto& g) { return g.second >= bytes; });
  if (gap == free_.end()) throw std::bad_alloc();
  const size_t offset = gap->first, rest = gap->second - bytes;
  free_.erase(gap);
  if (rest > 0) free_[offset + bytes] = rest;
  live_[offset] = bytes;
  if (open_) protect(offset, bytes, true);
  return base_ + offset;
}

void ProtectedMemory::release(void* block, size_t) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = live_.find(size_t(static_cast<char*>(block) - base_));
  if (it == live_.end()) throw std::logic_error("ProtectedMemory: release of a block it did not hand out");
  size_t offset = it->first, bytes = it->second;
  live_.erase(it);
  map_closed(base_ + offset, bytes);  // its pages are gone: a later block there starts zero-filled
  // Merge with the gaps on either side.
  auto next = free_.lower_bound(offset);  // the first gap after the block
  if (next != free_.end() && next->first == offset + bytes) {
    bytes += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    const auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      offset = prev->first;
      bytes += prev->second;
      free_.erase(prev);
    }
  }
  free_[offset] = bytes;
}

int64_t ProtectedMemory::protect_calls() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return protect_calls_;
}

void ProtectedMemory::set_open(bool open) {
  std::lock_guard<std::mutex> lock(mutex_);
  open_ = open;
  // One call per run of adjacent live blocks.
  for (auto it = live_.begin(); it != live_.end();) {
    const size_t first = it->first;
    size_t end = first + it->second;
    for (++it; it != live_.end() && it->first == end; ++it) end += it->second;
    protect(first, end - first, open);
  }
}

void ProtectedMemory::protect(size_t offset, size_t bytes, bool open) {
  ++protect_calls_;
  if (mprotect(base_ + offset, bytes, open ? PROT_READ | PROT_WRITE : PROT_NONE) != 0)
    throw std::runtime_error("ProtectedMemory: mprotect failed");
}

void ReleaseAfterQueue::release(void* block, size_t bytes) {
  if (!ops_.queued_.empty()) ++ops_.release_waits_;
  ops_.drain();
  inner_.release(block, bytes);
}

void CheckedOps::upload(const Tensor& dst, const void* host) {
  wait_on_host();
  inside([&] { cpu_.upload(dst, host); });
}

void CheckedOps::download(void* host, const Tensor& src) {
  wait_on_host();
  inside([&] { cpu_.download(host, src); });
}

void CheckedOps::copy(const Tensor& dst, const Tensor& src) {
  later([=, this] { cpu_.copy(dst, src); });
}

void CheckedOps::fill(const Tensor& t, double value) {
  later([=, this] { cpu_.fill(t, value); });
}

void CheckedOps::embedding_forward(const Tensor& out, const Tensor& tokens, const Tensor& wte,
                                   const Tensor& wpe) {
  later([=, this] { cpu_.embedding_forward(out, tokens, wte, wpe); });
}

void CheckedOps::embedding_backward(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout,
                                    const Tensor& tokens) {
  later([=, this] { cpu_.embedding_backward(dwte, dwpe, dout, tokens); });
}

void CheckedOps::embedding_forward_rows(const Tensor& out, const Tensor& tokens, const Tensor& wte,
                                        int64_t first, const Tensor& wpe) {
  later([=, this] { cpu_.embedding_forward_rows(out, tokens, wte, first, wpe); });
}

void CheckedOps::embedding_backward_rows(const Tensor& dwte, int64_t first, const Tensor& dwpe,
                                         const Tensor& dout, const Tensor& tokens) {
  later([=, this] { cpu_.embedding_backward_rows(dwte, first, dwpe, dout, tokens); });
}

void CheckedOps::layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                                   const Tensor& w, const Tensor& b) {
  later([=, this] { cpu_.layernorm_forward(out, mean, rstd, x, w, b); });
}

void CheckedOps::layernorm_backward(const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& dout,
                                    const Tensor& x, const Tensor& w, const Tensor& mean,
                                    const Tensor& rstd) {
  later([=, this] { cpu_.layernorm_backward(dx, dw, db, dout, x, w, mean, rstd); });
}

void CheckedOps::linear_forward(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& b) {
  later([=, this] { cpu_.linear_forward(out, x, w, b); });
}

void CheckedOps::linear_backward(const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& dout,
                                 const Tensor& x, const Tensor& w) {
  later([=, this] { cpu_.linear_backward(dx, dw, db, dout, x, w); });
}

void CheckedOps::linear_forward_columns(const Tensor& out, int64_t first, const Tensor& x, const Tensor& w,
                                        const Tensor& b) {
  later([=, this] { cpu_.linear_forward_columns(out, first, x, w, b); });
}

void CheckedOps::linear_backward_columns(const Tensor& dx, const Tensor& dw, const Tensor& db,
                                         const Tensor& dout, int64_t first, const Tensor& x,
                                         const Tensor& w) {
  later([=, this] { cpu_.linear_backward_columns(dx, dw, db, dout, first, x, w); });
}

void CheckedOps::attention_decode(const Tensor& out, const Tensor& att, const Tensor& qkv) {
  later([=, this] { cpu_.attention_decode(out, att, qkv); });
}

void CheckedOps::attention_forward(const Tensor& out, const Tensor& att, const Tensor& qkv,
                                   const DropoutMask* dropout) {
  const std::shared_ptr<KeptMask> kept = keep_mask(dropout, qkv.shape[0]);
  later([=, this] { cpu_.attention_forward(out, att, qkv, kept ? &kept->mask : nullptr); });
}

void CheckedOps::attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                                    const Tensor& out, const Tensor& att, const DropoutMask* dropout) {
  const std::shared_ptr<KeptMask> kept = keep_mask(dropout, qkv.shape[0]);
  later([=, this] { cpu_.attention_backward(dqkv, dout, qkv, out, att, kept ? &kept->mask : nullptr); });
}

void CheckedOps::gelu_forward(const Tensor& out, const Tensor& x) {
  later([=, this] { cpu_.gelu_forward(out, x); });
}

void CheckedOps::gelu_backward(const Tensor& dx, const Tensor& x, const Tensor& dout) {
  later([=, this] { cpu_.gelu_backward(dx, x, dout); });
}

void CheckedOps::add(const Tensor& out, const Tensor& a, const Tensor& b) {
  later([=, this] { cpu_.add(out, a, b); });
}

void CheckedOps::dropout_forward(const Tensor& out, const Tensor& x, const DropoutMask& mask) {
  const std::shared_ptr<KeptMask> kept = keep_mask(&mask, x.shape[0]);
  later([=, this] { cpu_.dropout_forward(out, x, kept->mask); });
}

void CheckedOps::dropout_backward(const Tensor& dx, const Tensor& dout, const DropoutMask& mask) {
  const std::shared_ptr<KeptMask> kept = keep_mask(&mask, dout.shape[0]);
  later([=, this] { cpu_.dropout_backward(dx, dout, kept->mask); });
}

void CheckedOps::cross_entropy_forward(const Tensor& losses, const Tensor& probs, const Tensor& logits,
                                       const Tensor& targets, int vocab) {
  later([=, this] { cpu_.cross_entropy_forward(losses, probs, logits, targets, vocab); });
}

void CheckedOps::cross_entropy_backward(const Tensor& dlogits, const Tensor& probs, const Tensor& targets,
                                        const Tensor& dlosses, int vocab) {
  later([=, this] { cpu_.cross_entropy_backward(dlogits, probs, targets, dlosses, vocab); });
}

void CheckedOps::cross_entropy_stats(const Tensor& stats, const Tensor& logits, const Tensor& targets,
                                     int64_t first, int vocab) {
  later([=, this] { cpu_.cross_entropy_stats(stats, logits, targets, first, vocab); });
}

void CheckedOps::cross_entropy_merge(const Tensor& losses, const Tensor& probs, const Tensor& logits,
                                     const Tensor& stats, int64_t first, int vocab) {
  later([=, this] { cpu_.cross_entropy_merge(losses, probs, logits, stats, first, vocab); });
}

void CheckedOps::cross_entropy_backward_columns(const Tensor& dlogits, const Tensor& probs,
                                                const Tensor& targets, const Tensor& dlosses, int64_t first,
                                                int vocab) {
  later([=, this] { cpu_.cross_entropy_backward_columns(dlogits, probs, targets, dlosses, first, vocab); });
}

double CheckedOps::sum(const Tensor& x) {
  wait_on_host();
  return inside([&] { return cpu_.sum(x); });
}

void CheckedOps::cast(const Tensor& dst, const Tensor& src, float scale) {
  later([=, this] { cpu_.cast(dst, src, scale); });
}

void CheckedOps::add_into(const Tensor& dst, const Tensor& src) {
  later([=, this] { cpu_.add_into(dst, src); });
}

double CheckedOps::sum_of_squares(const Tensor& x) {
  wait_on_host();
  return inside([&] { return cpu_.sum_of_squares(x); });
}

bool CheckedOps::all_finite(const Tensor& x) {
  wait_on_host();
  return inside([&] { return cpu_.all_finite(x); });
}

void CheckedOps::adamw(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                       const AdamWHyper& hyper, int64_t step, float grad_scale) {
  later([=, this] { cpu_.adamw(param, grad, m, v, hyper, step, grad_scale); });
}

bool CheckedOps::quantize(const Tensor& out, const Tensor& x, int64_t slice_len, int64_t count, int bits,
                          int block) {
  wait_on_host();
  return inside([&] { return cpu_.quantize(out, x, slice_len, count, bits, block); });
}

bool CheckedOps::quantize_with_feedback(const Tensor& out, const Tensor& x, const Tensor& error,
                                        int64_t slice_len, int64_t count, int bits, int block, float beta) {
  wait_on_host();
  return inside(
      [&] { return cpu_.quantize_with_feedback(out, x, error, slice_len, count, bits, block, beta); });
}

void CheckedOps::dequantize(const Tensor& out, const Tensor& in, int64_t slice_len, int64_t count, int bits,
                            int block, DType round_to) {
  later([=, this] { cpu_.dequantize(out, in, slice_len, count, bits, block, round_to); });
}

void CheckedOps::dequantize_add(const Tensor& acc, const Tensor& in, int64_t slice_len, int64_t count,
                                int bits, int block) {
  later([=, this] { cpu_.dequantize_add(acc, in, slice_len, count, bits, block); });
}

void CheckedOps::divide(const Tensor& x, float divisor) {
  later([=, this] { cpu_.divide(x, divisor); });
}

std::shared_ptr<CheckedOps::KeptMask> CheckedOps::keep_mask(const DropoutMask* mask, int64_t rows) {
  if (!mask) return nullptr;
  auto kept = std::make_shared<KeptMask>();
  if (mask->keys) kept->keys.assign(mask->keys, mask->keys + rows);
  kept->mask = *mask;  // p and the element offset
  kept->mask.keys = mask->keys ? kept->keys.data() : nullptr;
  return kept;
}

void CheckedOps::later(std::function<void()> op) {
  if (asynchronous_) {
    queued_.push_back(std::move(op));
  } else {
    inside(op);
  }
}

void CheckedOps::wait_on_host() {
  ++host_synchronizations_;
  drain();
}

void CheckedOps::drain() {
  std::vector<std::function<void()>> queued;
  queued.swap(queued_);
  for (const std::function<void()>& op : queued) inside(op);
}

}  // namespace gpt::testing
