// The CUDA backend of the device seam (kernels/ops.h), on one GPU: device memory from cudaMalloc, wire
// memory pinned and mapped into the device's address space (the communicator reads it on the host, kernels
// read it directly), every op enqueued on the Context's stream. Every op of the seam is implemented; the
// transformer ops take fp32 and the mixed fp16/bf16 contract of kernels/ops.h (dispatched on the activations'
// dtype: ops_internal.h), the engine's reductions and AdamW fp32; the members are defined in cuda_ops.cc
// (transfers, casts, add, linear, GELU) and one ops_<family>.cc per family of ops, over the kernels of the
// .cu files beside them.
#pragma once

#include <mutex>
#include <unordered_map>

#include "kernels/cuda/runtime.h"
#include "kernels/ops.h"
#include "tensor/kept_block_source.h"

namespace gpt::cuda {

// Pinned host memory mapped for the device (cudaHostAlloc with cudaHostAllocMapped), zero-filled. CudaOps
// keeps its blocks through a KeptBlockSource, so a step's wire buffers are pinned once: a block given back is
// retired with an event on the context's stream (kernels queued before may still read or write it; a
// collective on another stream has completed before its request did, and so before the block came back),
// and a kept block handed out again waits for that event alone, not for the whole device.
class PinnedBlockSource final : public gpt::BlockSource {
 public:
  explicit PinnedBlockSource(const Context& context) : context_(context) {}
  ~PinnedBlockSource() override;
  PinnedBlockSource(const PinnedBlockSource&) = delete;
  PinnedBlockSource& operator=(const PinnedBlockSource&) = delete;

  void* acquire(size_t bytes) override;
  void release(void* block, size_t bytes) override;  // waits for the device, then frees
  Device device() const override { return Device::kCPU; }
  void retire(void* block, size_t bytes) override;
  void reuse(void* block, size_t bytes) override;

 private:
  const Context& context_;
  std::mutex mutex_;
  std::unordered_map<void*, cudaEvent_t> retired_;  // a block's event, recorded when it was last given back
};

// Wire memory in device memory, for a communicator that reads and writes it on the device (NCCL): gathers and
// reductions then stay on the GPU instead of crossing PCIe twice. Blocks come from `memory` (counted in the
// device peak); a kept block handed out again is zero-filled on the context's stream, behind the work that
// used it last (a collective on another stream completed before its request did, and so before the block
// was given back), so reuse never waits on the host.
class DeviceWireMemory final : public gpt::BlockSource {
 public:
  DeviceWireMemory(const Context& context, gpt::BlockSource& memory) : context_(context), memory_(memory) {}
  void* acquire(size_t bytes) override { return memory_.acquire(bytes); }
  void release(void* block, size_t bytes) override { memory_.release(block, bytes); }
  Device device() const override { return Device::kCUDA; }
  void reuse(void* block, size_t bytes) override;

 private:
  const Context& context_;
  gpt::BlockSource& memory_;
};

// Device memory that counts what it holds: the peak is the memory table's "device peak" line.
class CountedDeviceMemory final : public gpt::BlockSource {
 public:
  void* acquire(size_t bytes) override;
  void release(void* block, size_t bytes) override;
  Device device() const override { return Device::kCUDA; }
  size_t peak_bytes() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return peak_;
  }

 private:
  DeviceBlockSource memory_;
  mutable std::mutex mutex_;  // several arenas, on several threads, may share this source
  size_t held_ = 0, peak_ = 0;
};

class CudaOps final : public Ops {
 public:
  explicit CudaOps(int device = 0) : context_(device) {}
  const Context& context() const { return context_; }
  size_t peak_device_bytes() const { return device_memory_.peak_bytes(); }

  Device device() const override { return Device::kCUDA; }
  BlockSource& device_memory() override { return device_memory_; }
  // Pinned host memory, or device memory after keep_wire_memory_on_device().
  BlockSource& wire_memory() override;
  // Makes wire memory device memory (DeviceWireMemory): for a run whose communicator moves wire bytes on the
  // device (NCCL) and whose host code never reads or writes them. Call before wire_memory() is first used;
  // throws std::logic_error after.
  void keep_wire_memory_on_device();
  void synchronize() override { context_.synchronize(); }
  // fp16/bf16: fp32 GEMMs on tensor cores (cuBLASLt's FAST_16F / FAST_16BF compute types); anything else:
  // exact fp32.
  void set_matmul_inputs(DType inputs) override;
  // fp16 and bf16 runs keep their activations in the compute dtype (the layer ops' mixed contract).
  DType compute_dtype(DType precision) const override {
    return precision == DType::kF16 || precision == DType::kBF16 ? precision : Ops::compute_dtype(precision);
  }

  void upload(const Tensor& dst, const void* host) override;
  void download(void* host, const Tensor& src) override;
  void copy(const Tensor& dst, const Tensor& src) override;
  void fill(const Tensor& t, double value) override;

  void embedding_forward(const Tensor& out, const Tensor& tokens, const Tensor& wte,
                         const Tensor& wpe) override;
  void embedding_backward(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout,
                          const Tensor& tokens) override;
  // The vocabulary-parallel embedding, defined in ops_layers.cc.
  void embedding_forward_rows(const Tensor& out, const Tensor& tokens, const Tensor& wte, int64_t first,
                              const Tensor& wpe) override;
  void embedding_backward_rows(const Tensor& dwte, int64_t first, const Tensor& dwpe, const Tensor& dout,
                               const Tensor& tokens) override;
  void layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                         const Tensor& w, const Tensor& b) override;
  // One kernel in the storage type (residual_layernorm_forward of layernorm.h), no widened copies.
  void residual_layernorm_forward(const Tensor& residual, const Tensor& out, const Tensor& mean,
                                  const Tensor& rstd, const Tensor& a, const Tensor& b, const Tensor& w,
                                  const Tensor& bias) override;
  void layernorm_backward(const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& dout,
                          const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd) override;
  void linear_forward(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& b) override;
  void linear_backward(const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& dout,
                       const Tensor& x, const Tensor& w) override;
  // One tile of a linear layer (memory-centric tiling), on strided columns of the whole layer's out / dout;
  // defined in ops_layers.cc.
  void linear_forward_columns(const Tensor& out, int64_t first, const Tensor& x, const Tensor& w,
                              const Tensor& b) override;
  void linear_backward_columns(const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& dout,
                               int64_t first, const Tensor& x, const Tensor& w) override;
  // The log-sum-exp [B, NH, T] of the flash kernels (ops_attention.cc), as kernels/attention_residual.h's
  // cuda_attention_residual() says for the planner.
  AttentionResidual attention_residual() const override { return cuda_attention_residual(); }
  void attention_forward(const Tensor& out, const Tensor& att, const Tensor& qkv,
                         const DropoutMask* dropout) override;
  void attention_decode(const Tensor& out, const Tensor& att, const Tensor& qkv) override;
  void attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                          const Tensor& att, const DropoutMask* dropout) override;
  void gelu_forward(const Tensor& out, const Tensor& x) override;
  // GELU in the GEMM's epilogue (cuBLASLt's GELU_AUX_BIAS): linear.h's linear_gelu_forward.
  void linear_gelu_forward(const Tensor& out, const Tensor& pre, const Tensor& x, const Tensor& w,
                           const Tensor& b) override;
  void gelu_backward(const Tensor& dx, const Tensor& x, const Tensor& dout) override;
  void add(const Tensor& out, const Tensor& a, const Tensor& b) override;
  void dropout_forward(const Tensor& out, const Tensor& x, const DropoutMask& mask) override;
  void dropout_backward(const Tensor& dx, const Tensor& dout, const DropoutMask& mask) override;
  void cross_entropy_forward(const Tensor& losses, const Tensor& probs, const Tensor& logits,
                             const Tensor& targets, int vocab) override;
  void cross_entropy_backward(const Tensor& dlogits, const Tensor& probs, const Tensor& targets,
                              const Tensor& dlosses, int vocab) override;
  // The vocabulary-parallel cross-entropy, defined in ops_loss_optimizer.cc.
  void cross_entropy_stats(const Tensor& stats, const Tensor& logits, const Tensor& targets, int64_t first,
                           int vocab) override;
  void cross_entropy_merge(const Tensor& losses, const Tensor& probs, const Tensor& logits,
                           const Tensor& stats, int64_t first, int vocab) override;
  void cross_entropy_backward_columns(const Tensor& dlogits, const Tensor& probs, const Tensor& targets,
                                      const Tensor& dlosses, int64_t first, int vocab) override;
  // The fused classifier: the logits GEMM per chunk, one softmax kernel pass, the backward GEMMs; defined in
  // ops_classifier.cc.
  void classifier_forward(const Tensor& losses, const Tensor& lnf, const Tensor& wte, const Tensor& targets,
                          int vocab, const Tensor& scratch) override;
  void classifier_backward(const Tensor& dlnf, const Tensor& dwte, const Tensor& losses, const Tensor& lnf,
                           const Tensor& wte, const Tensor& targets, const Tensor& dlosses, int vocab,
                           const Tensor& scratch) override;
  bool fuses_classifier() const override { return true; }
  double sum(const Tensor& x) override;

  void cast(const Tensor& dst, const Tensor& src, float scale) override;
  void add_into(const Tensor& dst, const Tensor& src) override;
  double sum_of_squares(const Tensor& x) override;
  bool all_finite(const Tensor& x) override;
  void adamw(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
             const AdamWHyper& hyper, int64_t step, float grad_scale) override;
  // Into fp16/bf16 compute weights, one kernel (adamw_f32_with_copy); into fp32 ones, the two ops.
  void adamw_with_copy(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                       const AdamWHyper& hyper, int64_t step, float grad_scale,
                       const Tensor& compute) override;
  bool quantize(const Tensor& out, const Tensor& x, int64_t slice_len, int64_t count, int bits,
                int block) override;
  bool quantize_with_feedback(const Tensor& out, const Tensor& x, const Tensor& error, int64_t slice_len,
                              int64_t count, int bits, int block, float beta) override;
  void dequantize(const Tensor& out, const Tensor& in, int64_t slice_len, int64_t count, int bits, int block,
                  DType round_to) override;
  void dequantize_add(const Tensor& acc, const Tensor& in, int64_t slice_len, int64_t count, int bits,
                      int block) override;
  void divide(const Tensor& x, float divisor) override;

 private:
  Context context_;
  CountedDeviceMemory device_memory_;
  PinnedBlockSource pinned_{context_};
  KeptBlockSource wire_memory_{pinned_, 0};  // every size: pinning costs even for small blocks
  DeviceWireMemory device_wire_{context_, device_memory_};
  KeptBlockSource device_wire_memory_{device_wire_, 0};  // every size: cudaFree synchronizes the device
  bool wire_on_device_ = false;
  bool wire_handed_out_ = false;
};

}  // namespace gpt::cuda
