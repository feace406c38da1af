// Dropout with masks that are never stored: element e of sequence b is kept when
// random::uniform32(keys[b], e) >= p, and kept values are scaled by 1/(1-p) (inverted dropout, as PyTorch),
// so the expectation of the output is the input. The mask is a pure function of (key, e): the backward, an
// activation-checkpoint recomputation and any thread split regenerate exactly the same one.
#pragma once

#include <cstdint>

namespace gpt::cpu {

// Whether element e of the sequence with key `key` survives dropout with probability p (the rule shared by
// these kernels and the attention kernel's dropout). p <= 0 keeps everything, p >= 1 nothing.
bool dropout_keep(uint64_t key, int64_t e, double p);

// out[b,e] = keep(keys[b], offset + e) ? inp[b,e] / (1-p) : 0 over [B, n] (n elements per sequence,
// row-major); keys is [B]. offset is the global index of each row's first element when the rows are slices of
// longer sequences (tensor and sequence parallelism). out may be inp. p = 0 copies (nothing when in place);
// p >= 1 zeroes.
template <typename Real>
void dropout_forward(Real* out, const Real* inp, const uint64_t* keys, double p, int B, int64_t n,
                     int64_t offset = 0);

// dinp[b,e] = keep(keys[b], offset + e) ? dout[b,e] / (1-p) : 0. Overwrites (unlike most backwards here: the
// layers want the masked gradient in a buffer of its own); dinp may be dout. Given the mask, dropout is a
// diagonal linear map, so this is the forward applied to the gradient.
template <typename Real>
void dropout_backward(Real* dinp, const Real* dout, const uint64_t* keys, double p, int B, int64_t n,
                      int64_t offset = 0);

}  // namespace gpt::cpu
