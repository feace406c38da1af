// qgZ's two-hop quantized all-to-all reduction, with LoCo's error feedback as an option; see qgz.h.
#include "zero/qgz.h"

#include <sstream>
#include <stdexcept>

#include "kernels/quant/quantize.h"

namespace gpt {

QgzSettings QgzSettings::of(const ZeroConfig& config) {
  return {config.gradient_block, config.intra_node_gradient_bits, float(config.loco_err_beta), config.loco};
}

std::string describe_qgz(const ZeroConfig& z) {
  std::ostringstream text;
  text << "int" << z.intra_node_gradient_bits << " intra-node, int" << kQuantizedGradientBits
       << " cross-node, block " << z.gradient_block << ", LoCo error feedback ";
  if (z.loco) {
    text << "err_beta " << z.loco_err_beta << ", reset_T " << z.loco_reset_T;
  } else {
    text << "off";
  }
  return text.str();
}

size_t qgz_chunk_bytes(int64_t chunk, int bits, int block) {
  return quant::quantized_bytes(chunk, bits, block);
}

size_t qgz_intra_feedback_bytes(int64_t chunk, int world, int block) {
  return size_t(world) * quant::quantized_bytes(chunk, kFeedbackBits, block);
}

size_t qgz_cross_feedback_bytes(int64_t chunk, int nodes, int block) {
  return size_t(nodes) * quant::quantized_bytes(chunk, kFeedbackBits, block);
}

void QgzExchange::release() {
  if (wire) {
    wire->release(send);
    wire->release(recv);
  }
  send = recv = nullptr;
}

namespace {

// Quantizes `count` slices of `chunk` fp32 values from x into out, through the kept errors when there are.
bool quantize_hop(const EngineContext& context, void* out, const float* x, uint8_t* kept, int64_t chunk,
                  int64_t count, int bits, const QgzSettings& s) {
  const Tensor wire = context.view(out, int64_t(count * qgz_chunk_bytes(chunk, bits, s.block)), DType::kI8);
  const Tensor values = context.view(x, chunk * count, DType::kF32);
  if (!kept) return context.ops.quantize(wire, values, chunk, count, bits, s.block);
  const Tensor errors =
      context.view(kept, int64_t(count * qgz_chunk_bytes(chunk, kFeedbackBits, s.block)), DType::kI8);
  return context.ops.quantize_with_feedback(wire, values, errors, chunk, count, bits, s.block, s.err_beta);
}

// Sums dequantized slices into acc: the first call (first) writes them, the later ones add. The same sums as
// adding every slice into zeros, since a dequantized value is never -0; and no pass to zero acc first.
void dequantize_sum(const EngineContext& context, const Tensor& acc, const Tensor& codes, int64_t chunk,
                    int bits, int block, bool first) {
  if (first) {
    context.ops.dequantize(acc, codes, chunk, 1, bits, block, DType::kF32);
  } else {
    context.ops.dequantize_add(acc, codes, chunk, 1, bits, block);
  }
}

}  // namespace

void qgz_start(const EngineContext& context, comm::Communicator& node, comm::Communicator& cross,
               const float* input, int64_t chunk, const QgzSettings& settings, const QgzFeedback& feedback,
               QgzExchange& exchange, bool* finite, comm::Phase phase) {
  const int L = node.size(), N = cross.size();
  const size_t qb = qgz_chunk_bytes(chunk, settings.intra_bits, settings.block);
  const size_t eb = qgz_chunk_bytes(chunk, kFeedbackBits, settings.block);
  exchange.chunk = chunk;
  exchange.wire = &context.wire;
  exchange.crossed = false;
  // Every buffer of the two hops is written whole before it is read (the quantizer's codes and scales, what
  // arrives, the first dequantized slice), so none needs a zero-fill.
  exchange.send = context.wire.allocate_for_overwrite("qgZ stage 1 (send)", "buffers: gradient buckets",
                                                      size_t(L) * N * qb);
  exchange.recv = context.wire.allocate_for_overwrite("qgZ stage 1 (received)", "buffers: gradient buckets",
                                                      size_t(L) * N * qb);
  // Order by local peer j', then node n: peer j' receives the chunks of ranks n L + j' for n = 0 .. N-1.
  bool ok = true;
  for (int peer = 0; peer < L; ++peer) {
    for (int n = 0; n < N; ++n) {
      const int destination = n * L + peer;
      uint8_t* out = static_cast<uint8_t*>(exchange.send) + (size_t(peer) * N + n) * qb;
      uint8_t* kept = feedback.intra ? feedback.intra + size_t(destination) * eb : nullptr;
      ok &= quantize_hop(context, out, input + int64_t(destination) * chunk, kept, chunk, 1,
                         settings.intra_bits, settings);
    }
  }
  *finite = ok;
  const std::vector<size_t> bytes(L, size_t(N) * qb);
  context.before_communication(node);
  exchange.request = node.all_to_all_v(exchange.send, bytes, exchange.recv, bytes, phase);
}

void qgz_cross(const EngineContext& context, comm::Communicator& node, comm::Communicator& cross,
               const QgzSettings& settings, const QgzFeedback& feedback, QgzExchange& exchange,
               comm::Phase phase) {
  const int L = node.size(), N = cross.size();
  const int64_t chunk = exchange.chunk;
  const size_t q1 = qgz_chunk_bytes(chunk, settings.intra_bits, settings.block);
  const size_t q2 = qgz_chunk_bytes(chunk, kQuantizedGradientBits, settings.block);
  exchange.request.wait();
  context.wire.release(exchange.send);  // stage 1 has been sent
  exchange.send =
      context.wire.allocate_for_overwrite("qgZ stage 2 (send)", "buffers: gradient buckets", N * q2);
  // Stage 1's sums, one node's slice at a time: for node n, the chunk of rank n L + j summed over this node's
  // L ranks in fp32, then requantized to int4 (blocks restart at each slice, so slice by slice is the same
  // code as all at once).
  float* partial = static_cast<float*>(
      context.wire.allocate_for_overwrite("qgZ partial sum", "buffers: gradient buckets", size_t(chunk) * 4));
  const Tensor partial_sum = context.view(partial, chunk, DType::kF32);
  const size_t e2 = qgz_chunk_bytes(chunk, kFeedbackBits, settings.block);
  for (int n = 0; n < N; ++n) {
    for (int source = 0; source < L; ++source) {
      const uint8_t* arrived = static_cast<const uint8_t*>(exchange.recv) + (size_t(source) * N + n) * q1;
      dequantize_sum(context, partial_sum, context.view(arrived, int64_t(q1), DType::kI8), chunk,
                     settings.intra_bits, settings.block, source == 0);
    }
    uint8_t* kept = feedback.cross ? feedback.cross + size_t(n) * e2 : nullptr;
    quantize_hop(context, static_cast<uint8_t*>(exchange.send) + size_t(n) * q2, partial, kept, chunk, 1,
                 kQuantizedGradientBits, settings);
  }
  context.wire.release(partial);
  context.wire.release(exchange.recv);
  // Stage 2: the exchange across nodes among the ranks with this local index.
  exchange.recv =
      context.wire.allocate_for_overwrite("qgZ stage 2 (received)", "buffers: gradient buckets", N * q2);
  const std::vector<size_t> bytes(N, q2);
  context.before_communication(cross);
  exchange.request = cross.all_to_all_v(exchange.send, bytes, exchange.recv, bytes, phase);
  exchange.crossed = true;
}

void qgz_finish(const EngineContext& context, comm::Communicator& node, comm::Communicator& cross,
                const QgzSettings& settings, const QgzFeedback& feedback, QgzExchange& exchange, float* out,
                comm::Phase phase) {
  if (!exchange.crossed) qgz_cross(context, node, cross, settings, feedback, exchange, phase);
  const int L = node.size(), N = cross.size();
  const size_t q2 = qgz_chunk_bytes(exchange.chunk, kQuantizedGradientBits, settings.block);
  exchange.request.wait();
  const Tensor result = context.view(out, exchange.chunk, DType::kF32);
  for (int n = 0; n < N; ++n) {
    const uint8_t* arrived = static_cast<const uint8_t*>(exchange.recv) + size_t(n) * q2;
    dequantize_sum(context, result, context.view(arrived, int64_t(q2), DType::kI8), exchange.chunk,
                   kQuantizedGradientBits, settings.block, n == 0);
  }
  context.ops.divide(result, float(L * N));  // one correctly rounded division
  exchange.release();
}

LocoFeedback::LocoFeedback(const EngineContext& context, const std::vector<int64_t>& chunks, int world,
                           int nodes, int node_size, int block)
    : context_(context), chunks_(chunks), world_(world), nodes_(nodes), node_size_(node_size), block_(block) {
  for (size_t b = 0; b < chunks_.size(); ++b) {
    const auto [intra, inter] = sizes(int(b));
    const std::string name = "qgZ kept errors, bucket " + std::to_string(b);
    // Arena blocks come zero-filled: no error kept yet.
    kept_.push_back({static_cast<uint8_t*>(context_.device.allocate(name + " (hop 1)", kCategory, intra)),
                     static_cast<uint8_t*>(context_.device.allocate(name + " (hop 2)", kCategory, inter))});
  }
}

LocoFeedback::~LocoFeedback() = default;  // the blocks stay with the arena, as the reducer's always did

std::pair<size_t, size_t> LocoFeedback::sizes(int bucket) const {
  return {qgz_intra_feedback_bytes(chunks_[bucket], world_, block_),
          qgz_cross_feedback_bytes(chunks_[bucket], nodes_, block_)};
}

size_t LocoFeedback::bytes() const {
  size_t total = 0;
  for (size_t b = 0; b < kept_.size(); ++b) {
    const auto [intra, inter] = sizes(int(b));
    total += intra + inter;
  }
  return total;
}

void LocoFeedback::for_each(const std::function<void(const Tensor&, size_t)>& visit) const {
  size_t at = 0;
  for (size_t b = 0; b < kept_.size(); ++b) {
    const auto [intra, inter] = sizes(int(b));
    visit(context_.view(kept_[b].intra, int64_t(intra), DType::kI8), at);
    visit(context_.view(kept_[b].cross, int64_t(inter), DType::kI8), at + intra);
    at += intra + inter;
  }
}

std::string LocoFeedback::layout() const {
  std::string layout = "block " + std::to_string(block_) + ", " + std::to_string(nodes_) + " nodes of " +
                       std::to_string(node_size_) + " ranks, chunks";
  for (int64_t chunk : chunks_) layout += " " + std::to_string(chunk);
  return layout;
}

std::vector<uint8_t> LocoFeedback::download() const {
  std::vector<uint8_t> host(bytes());
  for_each([&](const Tensor& kept, size_t at) { context_.ops.download(host.data() + at, kept); });
  return host;
}

void LocoFeedback::upload(const std::vector<uint8_t>& host) {
  if (host.size() != bytes()) {
    throw std::invalid_argument("GradientReducer: " + std::to_string(host.size()) +
                                " bytes of kept errors for buffers of " + std::to_string(bytes()));
  }
  for_each([&](const Tensor& kept, size_t at) { context_.ops.upload(kept, host.data() + at); });
}

void LocoFeedback::reset() {
  upload(std::vector<uint8_t>(bytes(), 0));
}

}  // namespace gpt
