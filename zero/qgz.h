// qgZ (ZeRO++): the gradient reduce-scatter as a quantized hierarchical all-to-all. The input holds W chunks
// of `chunk` fp32 values, chunk p destined for world rank p = n L + j (node n, local index j). Two hops:
//   1. quantize every chunk (int4, or int8 with zeropp_intra_node_gradient_bits 8; blocks restart at each
//      chunk); all-to-all inside the node: local peer j' gets the N chunks for ranks {n L + j'}; dequantize
//      the L arrivals of each chunk and sum them in fp32;
//   2. requantize those N partial sums to int4; all-to-all across nodes among the ranks with the same local
//      index: node n gets the partial sum for rank n L + j; dequantize the N arrivals, sum in fp32, divide by
//      W.
// Rank r ends with chunk r as the mean over all ranks (DeepSpeed returns L x the mean; we divide by W).
// Only 1/L of the data crosses nodes, at a quarter of fp16's bytes. Buffers are wire memory; the
// quantization, sums and division are ops of the device seam.
//
// LoCo error feedback (zeropp_loco_param; off by default). Each hop keeps, per value it quantizes, the error
// of its last quantization, and adds it before quantizing the next time. With x_t the values a hop quantizes
// at reduction t (a chunk of this rank's gradient in hop 1, a partial sum in hop 2), e_{t-1} its kept error
// and Q the hop's block quantizer (q s, its dequantized output):
//   h_t = x_t + e_{t-1}                                      what goes on the wire, as Q(h_t)
//   e_t = int8( beta e_{t-1} + (1 - beta) (h_t - Q(h_t)) )   beta = err_beta, e_0 = 0
// in fp32, each operation rounded on its own (kernels/quant/quantize_block.h), and int8(.) the int8 block
// quantizer with zeropp_gradient_block_size blocks: the store is about one byte per value (LoCo's compact
// store). Why it works: summing h_t - Q(h_t) over t, what the wire lost up to step k is
// (e_0 - e_k) / (1 - beta) plus the int8 store's rounding, bounded whatever k, where plain qgZ's loss is a
// sum of k quantization errors. The errors are zeroed every reset_T applied steps, after a skipped step and
// when the loss scale changes (they carry the old scale); a hop whose block overflowed clears that block.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "zero/config.h"
#include "zero/context.h"

namespace gpt {

// What a reduction needs to know about qgZ's settings.
struct QgzSettings {
  int block = 512;                          // zeropp_gradient_block_size
  int intra_bits = kQuantizedGradientBits;  // hop 1 (zeropp_intra_node_gradient_bits); hop 2 is int4
  float err_beta = 0;                       // LoCo's beta, when `feedback`
  bool feedback = false;                    // zeropp_loco_param given
  static QgzSettings of(const ZeroConfig& config);
};

// LoCo's kept errors of one bucket (device memory, int8 blocks; see above), or null without feedback.
struct QgzFeedback {
  uint8_t* intra = nullptr;  // hop 1: W slices of chunk, slice d for destination rank d
  uint8_t* cross = nullptr;  // hop 2: N slices of chunk, slice n for node n
};
// Bytes of a bucket's kept errors, hop 1 and hop 2.
size_t qgz_intra_feedback_bytes(int64_t chunk, int world, int block);
size_t qgz_cross_feedback_bytes(int64_t chunk, int nodes, int block);

// LoCo's kept errors of every bucket of a qgZ reduction (device memory, category kCategory), owned by it: the
// reduction hands each bucket's to its hops; checkpoints save and restore them; the engine zeroes them by the
// rules above. chunks: each bucket's elements per rank.
class LocoFeedback {
 public:
  static constexpr const char* kCategory = "qgZ error feedback";
  LocoFeedback(const EngineContext& context, const std::vector<int64_t>& chunks, int world, int nodes,
               int node_size, int block);
  ~LocoFeedback();
  LocoFeedback(const LocoFeedback&) = delete;
  LocoFeedback& operator=(const LocoFeedback&) = delete;

  const QgzFeedback& of(int bucket) const { return kept_[bucket]; }
  // Every bucket's kept errors back to back (hop 1 then hop 2 of bucket 0, then bucket 1, ...): their size,
  // a copy in host memory, and a copy back (the same size).
  size_t bytes() const;
  // What the bytes mean: the block, the nodes and every bucket's chunk ("block 128, 2 nodes of 4 ranks,
  // chunks 5376 2304"); two runs can exchange them when these are equal.
  std::string layout() const;
  std::vector<uint8_t> download() const;
  void upload(const std::vector<uint8_t>& bytes);
  void reset();  // every kept error to zero

 private:
  std::pair<size_t, size_t> sizes(int bucket) const;                             // hop 1's and hop 2's bytes
  void for_each(const std::function<void(const Tensor&, size_t)>& visit) const;  // with its offset

  const EngineContext& context_;
  std::vector<int64_t> chunks_;
  int world_, nodes_, node_size_, block_;
  std::vector<QgzFeedback> kept_;  // per bucket
};

// One reduction in flight. Stage 1 (the intra-node all-to-all) is posted by qgz_start, stage 2 (the
// cross-node all-to-all) by qgz_cross, and qgz_finish waits for whatever is still running. Splitting the
// stages lets the slow cross-node hop of one bucket run while backward computes the next ones.
struct QgzExchange {
  int64_t chunk = 0;
  Arena* wire = nullptr;
  void* send = nullptr;  // the current stage's quantized buffers (wire memory), alive until its all-to-all
  void* recv = nullptr;  // completes
  comm::Request request;
  bool crossed = false;  // stage 2 posted
  void release();        // gives send and recv back
};

// Quantizes the input and posts the intra-node all-to-all. *finite is false when some input value was inf or
// NaN (the quantizer then gives its block a NaN scale, so the overflow reaches the result too).
void qgz_start(const EngineContext& context, comm::Communicator& node, comm::Communicator& cross,
               const float* input, int64_t chunk, const QgzSettings& settings, const QgzFeedback& feedback,
               QgzExchange& exchange, bool* finite, comm::Phase phase);
// Waits for stage 1, reduces and requantizes, and posts stage 2 (returns without waiting for it).
void qgz_cross(const EngineContext& context, comm::Communicator& node, comm::Communicator& cross,
               const QgzSettings& settings, const QgzFeedback& feedback, QgzExchange& exchange,
               comm::Phase phase);
// Runs qgz_cross if it has not run, waits for stage 2 and writes this rank's mean chunk to out (chunk fp32
// values, overwritten).
void qgz_finish(const EngineContext& context, comm::Communicator& node, comm::Communicator& cross,
                const QgzSettings& settings, const QgzFeedback& feedback, QgzExchange& exchange, float* out,
                comm::Phase phase);

// qgZ's settings in words, for banners: "int4 intra-node, int4 cross-node, block 512, LoCo error feedback
// off".
std::string describe_qgz(const ZeroConfig& config);

// Wire bytes of one quantized chunk at `bits` per value.
size_t qgz_chunk_bytes(int64_t chunk, int bits, int block);

}  // namespace gpt
