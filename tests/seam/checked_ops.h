// A test-only backend that proves the device seam holds: its device memory is inaccessible (PROT_NONE)
// except while one of its ops runs, so any code outside the seam that reads or writes device memory (model
// state, gradients, activations) dies with SIGSEGV at the offending line. It computes with the CPU backend;
// wire memory (what the communicator touches) is ordinary host memory.
//
// Asynchronous, it also behaves as a GPU stream does at its worst: every op that returns nothing to the host
// is queued and runs only when the caller synchronizes or asks for a value (sum, all_finite, quantize,
// download, ...). Code that hands a wire buffer to the communicator without synchronizing first then sends
// stale bytes, or lets the communicator overwrite a buffer a queued op has yet to read, and a run on it
// differs from the CPU backend's.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/ops.h"

namespace gpt::testing {

// Zero-filled blocks, kept PROT_NONE while closed; released ones stay PROT_NONE even while open.
// The blocks are page-aligned ranges of one reserved stretch of address space, handed out first fit, so that
// opening and closing takes one mprotect per run of adjacent live blocks rather than one per block: every op
// opens and closes, and an mprotect (a TLB shootdown) costs ~30 us on some VMs, where a block per call made
// the 4-rank checked-backend test spend three quarters of its time in the kernel.
class ProtectedMemory final : public BlockSource {
 public:
  ProtectedMemory();
  ~ProtectedMemory() override;
  void* acquire(size_t bytes) override;
  void release(void* block, size_t bytes) override;
  Device device() const override { return Device::kCUDA; }  // "not the host": a stand-in device
  // Makes every live block readable and writable (open) or inaccessible (closed).
  void set_open(bool open);
  // The mprotect calls so far: set_open makes one per run of adjacent live blocks, acquire one while open.
  int64_t protect_calls() const;

 private:
  void protect(size_t offset, size_t bytes, bool open);

  mutable std::mutex mutex_;
  char* const base_;
  std::map<size_t, size_t> live_;  // offset in the reservation -> bytes (whole pages)
  std::map<size_t, size_t> free_;  // the same for the gaps, adjacent gaps merged
  bool open_ = false;
  int64_t protect_calls_ = 0;
};

class CheckedOps;

// A block source that frees a block only after the queued ops are done with it, as cudaFree and cudaFreeHost
// wait for the device.
class ReleaseAfterQueue final : public BlockSource {
 public:
  ReleaseAfterQueue(BlockSource& inner, CheckedOps& ops) : inner_(inner), ops_(ops) {}
  void* acquire(size_t bytes) override { return inner_.acquire(bytes); }
  void release(void* block, size_t bytes) override;
  Device device() const override { return inner_.device(); }

 private:
  BlockSource& inner_;
  CheckedOps& ops_;
};

class CheckedOps final : public Ops {
 public:
  explicit CheckedOps(bool asynchronous = false) : asynchronous_(asynchronous) {}
  Device device() const override { return Device::kCUDA; }
  BlockSource& device_memory() override { return device_release_; }
  BlockSource& wire_memory() override { return wire_release_; }
  void synchronize() override { wait_on_host(); }

  void upload(const Tensor& dst, const void* host) override;
  void download(void* host, const Tensor& src) override;
  void copy(const Tensor& dst, const Tensor& src) override;
  void fill(const Tensor& t, double value) override;
  void embedding_forward(const Tensor& out, const Tensor& tokens, const Tensor& wte,
                         const Tensor& wpe) override;
  void embedding_backward(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout,
                          const Tensor& tokens) override;
  void embedding_forward_rows(const Tensor& out, const Tensor& tokens, const Tensor& wte, int64_t first,
                              const Tensor& wpe) override;
  void embedding_backward_rows(const Tensor& dwte, int64_t first, const Tensor& dwpe, const Tensor& dout,
                               const Tensor& tokens) override;
  void layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                         const Tensor& w, const Tensor& b) override;
  void layernorm_backward(const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& dout,
                          const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd) override;
  void linear_forward(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& b) override;
  void linear_backward(const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& dout,
                       const Tensor& x, const Tensor& w) override;
  void linear_forward_columns(const Tensor& out, int64_t first, const Tensor& x, const Tensor& w,
                              const Tensor& b) override;
  void linear_backward_columns(const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& dout,
                               int64_t first, const Tensor& x, const Tensor& w) override;
  void attention_forward(const Tensor& out, const Tensor& att, const Tensor& qkv,
                         const DropoutMask* dropout) override;
  void attention_decode(const Tensor& out, const Tensor& att, const Tensor& qkv) override;
  void attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                          const Tensor& att, const DropoutMask* dropout) override;
  void gelu_forward(const Tensor& out, const Tensor& x) override;
  void gelu_backward(const Tensor& dx, const Tensor& x, const Tensor& dout) override;
  void add(const Tensor& out, const Tensor& a, const Tensor& b) override;
  void dropout_forward(const Tensor& out, const Tensor& x, const DropoutMask& mask) override;
  void dropout_backward(const Tensor& dx, const Tensor& dout, const DropoutMask& mask) override;
  void cross_entropy_forward(const Tensor& losses, const Tensor& probs, const Tensor& logits,
                             const Tensor& targets, int vocab) override;
  void cross_entropy_backward(const Tensor& dlogits, const Tensor& probs, const Tensor& targets,
                              const Tensor& dlosses, int vocab) override;
  void cross_entropy_stats(const Tensor& stats, const Tensor& logits, const Tensor& targets, int64_t first,
                           int vocab) override;
  void cross_entropy_merge(const Tensor& losses, const Tensor& probs, const Tensor& logits,
                           const Tensor& stats, int64_t first, int vocab) override;
  void cross_entropy_backward_columns(const Tensor& dlogits, const Tensor& probs, const Tensor& targets,
                                      const Tensor& dlosses, int64_t first, int vocab) override;
  double sum(const Tensor& x) override;
  void cast(const Tensor& dst, const Tensor& src, float scale) override;
  void add_into(const Tensor& dst, const Tensor& src) override;
  double sum_of_squares(const Tensor& x) override;
  bool all_finite(const Tensor& x) override;
  void adamw(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
             const AdamWHyper& hyper, int64_t step, float grad_scale) override;
  bool quantize(const Tensor& out, const Tensor& x, int64_t slice_len, int64_t count, int bits,
                int block) override;
  bool quantize_with_feedback(const Tensor& out, const Tensor& x, const Tensor& error, int64_t slice_len,
                              int64_t count, int bits, int block, float beta) override;
  void dequantize(const Tensor& out, const Tensor& in, int64_t slice_len, int64_t count, int bits, int block,
                  DType round_to) override;
  void dequantize_add(const Tensor& acc, const Tensor& in, int64_t slice_len, int64_t count, int bits,
                      int block) override;
  void divide(const Tensor& x, float divisor) override;

  int64_t calls() const { return calls_; }  // ops run so far
  // Host synchronizations so far: the calls that make the host wait for every op issued before them, as a
  // GPU backend's do (kernels/cuda/cuda_ops.cc): synchronize(), upload and download, and the ops that return
  // a value (sum, sum_of_squares, all_finite, quantize and quantize_with_feedback's finite flag). Counted
  // whether or not ops are queued, so a synchronous run counts the same.
  int64_t host_synchronizations() const { return host_synchronizations_; }
  // Block releases that found ops queued and ran them first (queued ops may still use the block).
  // Counted apart: CUDA's wire memory is kept and retired with an event instead (tensor/kept_block_source.h).
  int64_t release_waits() const { return release_waits_; }

 private:
  // Runs f with device memory open.
  template <typename F>
  auto inside(F&& f) {
    struct Open {
      ProtectedMemory& memory;
      explicit Open(ProtectedMemory& m) : memory(m) { memory.set_open(true); }
      ~Open() { memory.set_open(false); }
    } open(device_);
    ++calls_;
    return f();
  }

  // A dropout mask whose keys were copied at the call (the caller's host array may change before a queued op
  // runs, as it may before a GPU kernel runs).
  struct KeptMask {
    std::vector<uint64_t> keys;
    DropoutMask mask;
  };
  static std::shared_ptr<KeptMask> keep_mask(const DropoutMask* mask, int64_t rows);
  // Runs op now, or queues it when asynchronous.
  void later(std::function<void()> op);
  // Counts a host synchronization, then drains.
  void wait_on_host();
  // Runs the queued ops in issue order.
  void drain();
  friend class ReleaseAfterQueue;

  const bool asynchronous_;
  std::vector<std::function<void()>> queued_;
  CpuOps cpu_;
  ProtectedMemory device_;
  ReleaseAfterQueue device_release_{device_, *this};
  ReleaseAfterQueue wire_release_{cpu_.wire_memory(), *this};
  int64_t calls_ = 0;
  int64_t host_synchronizations_ = 0;
  int64_t release_waits_ = 0;
};

}  // namespace gpt::testing
