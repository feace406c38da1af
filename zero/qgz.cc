// qgZ's two-hop int4 all-to-all reduction; see qgz.h.
#include "zero/qgz.h"

#include <algorithm>

#include "kernels/quant/quantize.h"
#include "zero/config.h"

namespace gpt {

size_t qgz_chunk_bytes(int64_t chunk, int block) {
  return quant::quantized_bytes(chunk, kQuantizedGradientBits, block);
}

void qgz_start(comm::Communicator& node, comm::Communicator& cross, const float* input, int64_t chunk,
               int block, QgzExchange& exchange, bool* finite, comm::Phase phase) {
  const int L = node.size(), N = cross.size();
  const size_t qb = qgz_chunk_bytes(chunk, block);
  exchange.chunk = chunk;
  exchange.send.assign(size_t(L) * N * qb, 0);
  exchange.recv.assign(size_t(L) * N * qb, 0);
  // Order by local peer j', then node n: peer j' receives the chunks of ranks n L + j' for n = 0 .. N-1.
  bool ok = true;
  for (int peer = 0; peer < L; ++peer) {
    for (int n = 0; n < N; ++n) {
      const int destination = n * L + peer;
      uint8_t* out = exchange.send.data() + (size_t(peer) * N + n) * qb;
      ok &= quant::quantize_slice(input + int64_t(destination) * chunk, chunk, kQuantizedGradientBits, block,
                                  out);
    }
  }
  *finite = ok;
  const std::vector<size_t> bytes(L, size_t(N) * qb);
  exchange.request = node.all_to_all_v(exchange.send.data(), bytes, exchange.recv.data(), bytes, phase);
}

void qgz_finish(comm::Communicator& node, comm::Communicator& cross, int block, QgzExchange& exchange,
                float* out, comm::Phase phase) {
  const int L = node.size(), N = cross.size();
  const int64_t chunk = exchange.chunk;
  const size_t qb = qgz_chunk_bytes(chunk, block);
  exchange.request.wait();
  // Stage 1's sums: for each node n, the chunk of rank n L + j summed over this node's L ranks, in fp32.
  std::vector<float> partial(size_t(N) * chunk, 0.0f);
  for (int source = 0; source < L; ++source) {
    quant::dequantize_add_slices(exchange.recv.data() + size_t(source) * N * qb, chunk, N,
                                 kQuantizedGradientBits, block, partial.data());
  }
  exchange.send.clear();
  exchange.recv.clear();
  // Stage 2: requantize and exchange across nodes among the ranks with this local index.
  std::vector<uint8_t> send(size_t(N) * qb), recv(size_t(N) * qb);
  quant::quantize_slices(partial.data(), chunk, N, kQuantizedGradientBits, block, send.data());
  const std::vector<size_t> bytes(N, qb);
  cross.all_to_all_v(send.data(), bytes, recv.data(), bytes, phase).wait();
  std::fill(out, out + chunk, 0.0f);
  for (int n = 0; n < N; ++n) {
    quant::dequantize_add(recv.data() + size_t(n) * qb, chunk, kQuantizedGradientBits, block, out);
  }
  const float world = float(L * N);
  for (int64_t i = 0; i < chunk; ++i) out[i] /= world;  // one correctly rounded division
}

}  // namespace gpt
