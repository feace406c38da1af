// Attention dropout's launch parameters, shared by the T x T kernels (attention.cu) and the flash kernels
// (flash_attention.cu): the keys of up to kMaxDropoutKeys sequences travel by value as a kernel parameter
// (1 KiB), so the caller's host keys may change once a launch is enqueued; longer batches launch in runs.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "kernels/common/dropout_bits.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/runtime.h"

namespace gpt::cuda {

constexpr int kMaxDropoutKeys = 128;  // dropout keys per launch: 1 KiB of kernel parameters

// Dropout for one launch: keys[bl] is the key of sequence b0 + bl.
struct AttentionDropParams {
  uint64_t threshold;
  uint64_t offset;  // the counter of head 0's (0, 0): AttentionDropout::element_offset
  float scale;      // 1/(1-p)
  int active;       // 0: no dropout
  uint64_t keys[kMaxDropoutKeys];
};

// Calls launch(b0, count, params) for each run of up to kMaxDropoutKeys sequences, params holding their keys.
// `op` names the caller in the error for dropout without keys.
template <typename F>
void for_each_dropout_chunk(const char* op, int B, const AttentionDropout* dropout, F&& launch) {
  const bool active = dropout != nullptr && dropout->p > 0;
  if (active && dropout->keys == nullptr)
    throw CudaError(std::string(op) + ": dropout with p > 0 needs its keys");
  AttentionDropParams params{};
  params.active = active ? 1 : 0;
  params.threshold = active ? dropout::threshold(dropout->p) : 0;
  params.offset = active ? uint64_t(dropout->element_offset) : 0;
  params.scale = active ? dropout::scale<float>(dropout->p) : 1.0f;
  for (int b0 = 0; b0 < B; b0 += kMaxDropoutKeys) {
    const int count = std::min(kMaxDropoutKeys, B - b0);
    if (active) std::copy(dropout->keys + b0, dropout->keys + b0 + count, params.keys);
    launch(b0, count, params);
  }
}

}  // namespace gpt::cuda
