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
    : comm_(comm),
      context_(context),
      staging_(context, "tensor-parallel staging"),
      sums_(context, "tensor-parallel sums") {}

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
  context_.ops.copy(wire, x);
  // fp32 and fp64 sums land in place, on this rank's own part of the send buffer; fp16/bf16 parts travel in
  // their dtype and arrive summed in fp32 (comm::accumulation_dtype), in a buffer of their own, rounded once
  // into out (the half layer loop's).
  const DType accumulation = comm::accumulation_dtype(x.dtype);
  const Tensor sums = accumulation == x.dtype ? part(wire, n * rank(), n) : sums_.view(n, accumulation);
  context_.before_communication(comm_);
  comm_.reduce_scatter(wire.data, x.dtype, sums.data, size_t(n), 1.0f, tensor_phase(traffic)).wait();
  if (accumulation == x.dtype) return context_.ops.copy(out, sums);
  context_.ops.cast(out, sums);
}

}  // namespace gpt
