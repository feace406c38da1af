// qgZ (ZeRO++): the gradient reduce-scatter as an int4 hierarchical all-to-all. The input holds W chunks of
// `chunk` fp32 values, chunk p destined for world rank p = n L + j (node n, local index j). Two hops:
//   1. quantize every chunk to int4 (blocks restart at each chunk); all-to-all inside the node: local peer j'
//      gets the N chunks for ranks {n L + j'}; dequantize the L arrivals of each chunk and sum them in fp32;
//   2. requantize those N partial sums; all-to-all across nodes among the ranks with the same local index:
//      node n gets the partial sum for rank n L + j; dequantize the N arrivals, sum in fp32, divide by W.
// Rank r ends with chunk r as the mean over all ranks (DeepSpeed returns L x the mean; we divide by W).
// Only 1/L of the data crosses nodes, at a quarter of fp16's bytes. Buffers are wire memory; the
// quantization, sums and division are ops of the device seam.
#pragma once

#include <cstdint>
#include <vector>

#include "comm/communicator.h"
#include "zero/config.h"
#include "zero/context.h"

namespace gpt {

struct QgzExchange {
  int64_t chunk = 0;
  Arena* wire = nullptr;
  void* send = nullptr;  // stage 1's int4 buffers (wire memory), alive until the all-to-all completes
  void* recv = nullptr;
  comm::Request request;
  void release();  // gives send and recv back
};

// Quantizes the input and posts the intra-node all-to-all. *finite is false when some input value was inf or
// NaN (the quantizer then gives its block a NaN scale, so the overflow reaches the result too).
void qgz_start(const EngineContext& context, comm::Communicator& node, comm::Communicator& cross,
               const float* input, int64_t chunk, int block, QgzExchange& exchange, bool* finite,
               comm::Phase phase);
// Waits for stage 1, reduces and requantizes, runs stage 2 and writes this rank's mean chunk to out (chunk
// fp32 values, overwritten).
void qgz_finish(const EngineContext& context, comm::Communicator& node, comm::Communicator& cross, int block,
                QgzExchange& exchange, float* out, comm::Phase phase);

// Wire bytes of one quantized chunk.
size_t qgz_chunk_bytes(int64_t chunk, int block);

}  // namespace gpt
