// The dry backend of the device seam: every op does nothing, in no memory. Its device and wire memory are
// CountingBlockSources (tensor/counting_block_source.h): blocks are address ranges that nothing backs. The
// planner and the memory guard run the real engine on it (zero/dry_run.h) to learn what the engine's arenas
// hold at their peak, by walking one step's schedule without its arithmetic. Values that reach the host read
// as zeros (download), sums as 0 and every check as passed, so the engine takes its ordinary path: a finite
// loss, no overflow, no skipped step.
#pragma once

#include <cstring>

#include "kernels/ops.h"
#include "tensor/counting_block_source.h"

namespace gpt {

class DryOps final : public Ops {
 public:
  Device device() const override { return Device::kCPU; }
  BlockSource& device_memory() override { return device_memory_; }
  BlockSource& wire_memory() override { return wire_memory_; }
  bool computes() const override { return false; }
  void synchronize() override {}

  const CountingBlockSource& counted_device_memory() const { return device_memory_; }
  const CountingBlockSource& counted_wire_memory() const { return wire_memory_; }

  void upload(const Tensor& dst, const void* host) override {}
  void download(void* host, const Tensor& src) override { std::memset(host, 0, src.nbytes()); }
  void copy(const Tensor& dst, const Tensor& src) override {}
  void fill(const Tensor& t, double value) override {}

  void embedding_forward(const Tensor& out, const Tensor& tokens, const Tensor& wte,
                         const Tensor& wpe) override {}
  void embedding_backward(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout,
                          const Tensor& tokens) override {}
  void embedding_forward_rows(const Tensor& out, const Tensor& tokens, const Tensor& wte, int64_t first,
                              const Tensor& wpe) override {}
  void embedding_backward_rows(const Tensor& dwte, int64_t first, const Tensor& dwpe, const Tensor& dout,
                               const Tensor& tokens) override {}
  void layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                         const Tensor& w, const Tensor& b) override {}
  void layernorm_backward(const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& dout,
                          const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd) override {
  }
  void linear_forward(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& b) override {}
  void linear_backward(const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& dout,
                       const Tensor& x, const Tensor& w) override {}
  void linear_forward_columns(const Tensor& out, int64_t first, const Tensor& x, const Tensor& w,
                              const Tensor& b) override {}
  void linear_backward_columns(const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& dout,
                               int64_t first, const Tensor& x, const Tensor& w) override {}
  void attention_forward(const Tensor& out, const Tensor& att, const Tensor& qkv,
                         const DropoutMask* dropout) override {}
  void attention_decode(const Tensor& out, const Tensor& att, const Tensor& qkv) override {}
  void attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                          const Tensor& att, const DropoutMask* dropout) override {}
  void gelu_forward(const Tensor& out, const Tensor& x) override {}
  void gelu_backward(const Tensor& dx, const Tensor& x, const Tensor& dout) override {}
  void add(const Tensor& out, const Tensor& a, const Tensor& b) override {}
  void dropout_forward(const Tensor& out, const Tensor& x, const DropoutMask& mask) override {}
  void dropout_backward(const Tensor& dx, const Tensor& dout, const DropoutMask& mask) override {}
  void cross_entropy_forward(const Tensor& losses, const Tensor& probs, const Tensor& logits,
                             const Tensor& targets, int vocab) override {}
  void cross_entropy_backward(const Tensor& dlogits, const Tensor& probs, const Tensor& targets,
                              const Tensor& dlosses, int vocab) override {}
  void cross_entropy_stats(const Tensor& stats, const Tensor& logits, const Tensor& targets, int64_t first,
                           int vocab) override {}
  void cross_entropy_merge(const Tensor& losses, const Tensor& probs, const Tensor& logits,
                           const Tensor& stats, int64_t first, int vocab) override {}
  void cross_entropy_backward_columns(const Tensor& dlogits, const Tensor& probs, const Tensor& targets,
                                      const Tensor& dlosses, int64_t first, int vocab) override {}
  void classifier_forward(const Tensor& losses, const Tensor& lnf, const Tensor& wte, const Tensor& targets,
                          int vocab, const Tensor& scratch) override {}
  void classifier_backward(const Tensor& dlnf, const Tensor& dwte, const Tensor& losses, const Tensor& lnf,
                           const Tensor& wte, const Tensor& targets, const Tensor& dlosses, int vocab,
                           const Tensor& scratch) override {}
  double sum(const Tensor& x) override { return 0; }

  void cast(const Tensor& dst, const Tensor& src, float scale) override {}
  void add_into(const Tensor& dst, const Tensor& src) override {}
  double sum_of_squares(const Tensor& x) override { return 0; }
  bool all_finite(const Tensor& x) override { return true; }
  void adamw(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
             const AdamWHyper& hyper, int64_t step, float grad_scale) override {}
  bool quantize(const Tensor& out, const Tensor& x, int64_t slice_len, int64_t count, int bits,
                int block) override {
    return true;
  }
  bool quantize_with_feedback(const Tensor& out, const Tensor& x, const Tensor& error, int64_t slice_len,
                              int64_t count, int bits, int block, float beta) override {
    return true;
  }
  void dequantize(const Tensor& out, const Tensor& in, int64_t slice_len, int64_t count, int bits, int block,
                  DType round_to) override {}
  void dequantize_add(const Tensor& acc, const Tensor& in, int64_t slice_len, int64_t count, int bits,
                      int block) override {}
  void divide(const Tensor& x, float divisor) override {}

 private:
  CountingBlockSource device_memory_, wire_memory_;
};

}  // namespace gpt
