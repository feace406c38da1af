// Naive double-precision references for the CPU kernels' forwards and AdamW: plain loops written straight
// from the formulas, sharing no code with kernels/cpu, for the float kernels to be compared against.
#pragma once

#include <cstdint>
#include <vector>

namespace gpt::test::ref {

using Vec = std::vector<double>;

Vec embedding(const std::vector<int32_t>& tokens, const Vec& wte, const Vec& wpe, int B, int T, int C);
Vec layernorm(const Vec& inp, const Vec& weight, const Vec& bias, int N, int C);
Vec linear(const Vec& inp, const Vec& weight, const Vec* bias, int N, int C, int OC);
// Returns out [B,T,C]; att [B,NH,T,T] is filled with the probabilities.
Vec attention(Vec& att, const Vec& qkv, int B, int T, int C, int NH);
Vec gelu(const Vec& inp);
// Returns the losses [N]; probs [N,Vp] is filled.
Vec cross_entropy(Vec& probs, const Vec& logits, const std::vector<int32_t>& targets, int N, int V, int Vp);

struct Adam {
  double lr, beta1, beta2, eps, weight_decay;
};
void adamw(Vec& param, const Vec& grad, Vec& m, Vec& v, const Adam& h, int step, double grad_scale);

}  // namespace gpt::test::ref
