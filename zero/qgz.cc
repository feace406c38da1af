// qgZ's two-hop int4 all-to-all reduction; see qgz.h.
#include "zero/qgz.h"

#include "kernels/quant/quantize.h"

namespace gpt {

size_t qgz_chunk_bytes(int64_t chunk, int block) {
  return quant::quantized_bytes(chunk, kQuantizedGradientBits, block);
}

void QgzExchange::release() {
  if (wire) {
    wire->release(send);
    wire->release(recv);
  }
  send = recv = nullptr;
}

void qgz_start(const EngineContext& context, comm::Communicator& node, comm::Communicator& cross,
               const float* input, int64_t chunk, int block, QgzExchange& exchange, bool* finite,
               comm::Phase phase) {
  const int L = node.size(), N = cross.size();
  const size_t qb = qgz_chunk_bytes(chunk, block);
  exchange.chunk = chunk;
  exchange.wire = &context.wire;
  exchange.send = context.wire.allocate("qgZ stage 1 (send)", "buffers", size_t(L) * N * qb);
  exchange.recv = context.wire.allocate("qgZ stage 1 (received)", "buffers", size_t(L) * N * qb);
  // Order by local peer j', then node n: peer j' receives the chunks of ranks n L + j' for n = 0 .. N-1.
  bool ok = true;
  for (int peer = 0; peer < L; ++peer) {
    for (int n = 0; n < N; ++n) {
      const int destination = n * L + peer;
      uint8_t* out = static_cast<uint8_t*>(exchange.send) + (size_t(peer) * N + n) * qb;
      ok &= context.ops.quantize(context.view(out, int64_t(qb), DType::kI8),
                                 context.view(input + int64_t(destination) * chunk, chunk, DType::kF32),
                                 chunk, 1, kQuantizedGradientBits, block);
    }
  }
  *finite = ok;
  const std::vector<size_t> bytes(L, size_t(N) * qb);
  exchange.request = node.all_to_all_v(exchange.send, bytes, exchange.recv, bytes, phase);
}

void qgz_finish(const EngineContext& context, comm::Communicator& node, comm::Communicator& cross, int block,
                QgzExchange& exchange, float* out, comm::Phase phase) {
  const int L = node.size(), N = cross.size();
  const int64_t chunk = exchange.chunk;
  const size_t qb = qgz_chunk_bytes(chunk, block);
  Ops& ops = context.ops;
  exchange.request.wait();
  // Stage 1's sums: for each node n, the chunk of rank n L + j summed over this node's L ranks, in fp32.
  float* partial = static_cast<float*>(context.wire.allocate("qgZ partial sums", "buffers", N * chunk * 4));
  const Tensor partials = context.view(partial, N * chunk, DType::kF32);
  for (int source = 0; source < L; ++source) {
    const uint8_t* arrived = static_cast<const uint8_t*>(exchange.recv) + size_t(source) * N * qb;
    ops.dequantize_add(partials, context.view(arrived, int64_t(N * qb), DType::kI8), chunk, N,
                       kQuantizedGradientBits, block);
  }
  exchange.release();
  // Stage 2: requantize and exchange across nodes among the ranks with this local index.
  void* send = context.wire.allocate("qgZ stage 2 (send)", "buffers", N * qb);
  void* recv = context.wire.allocate("qgZ stage 2 (received)", "buffers", N * qb);
  ops.quantize(context.view(send, int64_t(N * qb), DType::kI8), partials, chunk, N, kQuantizedGradientBits,
               block);
  const std::vector<size_t> bytes(N, qb);
  cross.all_to_all_v(send, bytes, recv, bytes, phase).wait();
  const Tensor result = context.view(out, chunk, DType::kF32);
  ops.fill(result, 0);
  for (int n = 0; n < N; ++n) {
    ops.dequantize_add(result,
                       context.view(static_cast<uint8_t*>(recv) + size_t(n) * qb, int64_t(qb), DType::kI8),
                       chunk, 1, kQuantizedGradientBits, block);
  }
  ops.divide(result, float(L * N));  // one correctly rounded division
  for (void* buffer : {static_cast<void*>(partial), send, recv}) context.wire.release(buffer);
}

}  // namespace gpt
