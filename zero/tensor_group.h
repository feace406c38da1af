// The model's tensor-parallel collectives (model/tensor_parallel.h) over a communicator of the group's ranks,
// metered in the phases tp_fwd, tp_bwd and act_gather. The layers' tensors live in device memory and the
// communicator works on wire memory, so each collective stages its data through one wire buffer, grown to the
// largest call (on the CPU backend both are host memory and the copies are memcpy).
#pragma once

#include <cstdint>

#include "comm/communicator.h"
#include "model/tensor_parallel.h"
#include "zero/context.h"

namespace gpt {

// The meter's phase of a tensor-parallel collective.
comm::Phase tensor_phase(TensorTraffic traffic);

class CommTensorGroup final : public TensorGroup {
 public:
  // comm: the tensor-parallel group's ranks (consecutive world ranks), outliving this.
  CommTensorGroup(comm::Communicator& comm, const EngineContext& context);
  CommTensorGroup(const CommTensorGroup&) = delete;
  CommTensorGroup& operator=(const CommTensorGroup&) = delete;

  int size() const override { return comm_.size(); }
  int rank() const override { return comm_.rank(); }
  void all_reduce(const Tensor& x, TensorTraffic traffic) override;
  void all_gather(const Tensor& out, const Tensor& x, TensorTraffic traffic) override;
  void reduce_scatter(const Tensor& out, const Tensor& x, TensorTraffic traffic) override;

 private:
  Tensor part(const Tensor& whole, int64_t first, int64_t n) const;

  comm::Communicator& comm_;
  EngineContext context_;
  WireStaging staging_;
  WireStaging sums_;  // a reduce-scatter's fp32 sums of fp16/bf16 parts
};

}  // namespace gpt
