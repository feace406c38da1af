// CommTensorGroup: tensor-parallel collectives staged through wire memory; see tensor_group.h.
#include "zero/tensor_group.h"

namespace gpt {

comm::Phase tensor_phase(TensorTraffic traffic) {
  switch (traffic) {
    case TensorTraffic::kForward:
      return comm::Phase::kTpFwd;
    case TensorTraffic::kBackward:
      return comm::Phase::kTpBwd;
    case TensorTraffic::kActivationGather:
      return comm::Phase::kActGather;
  }
  return comm::Phase::kOther;
}

CommTensorGroup::CommTensorGroup(comm::Communicator& comm, const EngineContext& context)
    : comm_(comm), context_(context), staging_(context, "tensor-parallel staging") {}

Tensor CommTensorGroup::part(const Tensor& whole, int64_t first, int64_t n) const {
  return context_.view(static_cast<char*>(whole.data) + dtype_bytes(whole.dtype, first), n, whole.dtype);
}

void CommTensorGroup::all_reduce(const Tensor& x, TensorTraffic traffic) {
  const int64_t n = x.numel();
  const Tensor wire = staging_.view(n, x.dtype);
  context_.ops.copy(wire, x);
  context_.before_communication(comm_);
  comm_.all_reduce(wire.data, x.dtype, size_t(n), 1.0f, tensor_phase(traffic)).wait();
  context_.ops.copy(x, wire);
}

void CommTensorGroup::all_gather(const Tensor& out, const Tensor& x, TensorTraffic traffic) {
  const int64_t n = x.numel();
  const Tensor wire = staging_.view(n * size(), x.dtype);
  const Tensor mine = part(wire, n * rank(), n);
  context_.ops.copy(mine, x);
  context_.before_communication(comm_);
  comm_.all_gather(mine.data, wire.data, dtype_bytes(x.dtype, n), tensor_phase(traffic)).wait();
  context_.ops.copy(out, wire);
}

void CommTensorGroup::reduce_scatter(const Tensor& out, const Tensor& x, TensorTraffic traffic) {
  const int64_t n = out.numel();
  const Tensor wire = staging_.view(n * size(), x.dtype);
  const Tensor mine = part(wire, n * rank(), n);
  context_.ops.copy(wire, x);
  context_.before_communication(comm_);
  // In place: this rank's sum lands on its own part of the send buffer (allowed for fp32 and fp64 data).
  comm_.reduce_scatter(wire.data, x.dtype, mine.data, size_t(n), 1.0f, tensor_phase(traffic)).wait();
  context_.ops.copy(out, mine);
}

}  // namespace gpt
