// The batched GEMMs of causal attention without dropout (kernels/cuda/attention_gemm.cu runs them on cuBLAS),
// written as data so that a host test can run the same plan with a reference GEMM
// (tests/kernels:attention_gemm_plan_test) and check the layout against the CPU attention here, where no
// GPU is.
//
// Per sequence b and head h, with hs = C/NH and row-major Q, K, V [T, hs] (rows 3C apart in qkv), dO and O
// [T, hs] (rows C apart), P [T, T]:
//   forward:  S = scale Q K^T;  P = causal_softmax(S) (in att);  O = P V
//   backward: dP = dO V^T;  dV += P^T dO;  dS = P * (dP - rowsum(P * dP)) * scale;  dQ += dS K;  dK += dS^T Q
// A GEMM here is cuBLAS's: column-major, C = alpha op(A) op(B) + beta C. A row-major matrix X with rows ld
// apart is the column-major X^T with leading dimension ld, so each product is planned as its transpose:
//   X = alpha L R^T  (X [T, T])          ->  X^cm = alpha (R^cm)^T L^cm    (op_a = T, op_b = N)
//   Y = X Z, Y = X^T Z  (Y, Z [T, hs])   ->  Y^cm = Z^cm X^cm, Z^cm (X^cm)^T   (X as stored: op_b = N or T)
// One strided-batched GEMM covers `heads` consecutive heads: they are hs columns apart in qkv, out, dout and
// dqkv, and T*T apart in att and the scratch.
#pragma once

#include <array>
#include <cstdint>

namespace gpt {

// The tensors a planned GEMM reads or writes: the op's arguments and the backward's dP/dS scratch
// [heads, T, T].
enum class AttentionTensor { kQkv, kOut, kAtt, kDout, kDqkv, kScratch };

struct AttentionOperand {
  AttentionTensor tensor = AttentionTensor::kQkv;
  int64_t offset = 0;  // elements from the tensor's start to the first head's block
  int ld = 0;          // leading dimension (column-major)
  int64_t stride = 0;  // elements between consecutive heads' blocks
};

struct AttentionGemm {
  bool transpose_a = false, transpose_b = false;
  int m = 0, n = 0, k = 0;
  AttentionOperand a, b, c;
  float alpha = 1.0f, beta = 0.0f;
  int batch = 0;  // heads
};

namespace attention_plan {

inline AttentionOperand rows(AttentionTensor tensor, int64_t offset, int ld) {
  return {tensor, offset, ld, 0};
}

// X [T, T] = alpha L R^T for `heads` heads: L and R [T, hs] blocks hs apart, X blocks T*T apart.
inline AttentionGemm scores(AttentionOperand x, AttentionOperand l, AttentionOperand r, int T, int hs,
                            int heads, float alpha) {
  l.stride = r.stride = hs;
  x.ld = T, x.stride = int64_t(T) * T;
  return {true, false, T, T, hs, r, l, x, alpha, 0.0f, heads};
}

// Y [T, hs] = X Z + beta Y (X^T Z when transpose_x): X [T, T] blocks T*T apart, Y and Z blocks hs apart.
inline AttentionGemm times_values(AttentionOperand y, AttentionOperand x, bool transpose_x,
                                  AttentionOperand z, int T, int hs, int heads, float beta) {
  z.stride = y.stride = hs;
  x.ld = T, x.stride = int64_t(T) * T;
  return {false, transpose_x, hs, T, T, z, x, y, 1.0f, beta, heads};
}

}  // namespace attention_plan

// Sequence b's forward: [0] S = scale Q K^T into att (all NH heads), then the causal softmax of att's rows,
// then [1] O = P V into out.
inline std::array<AttentionGemm, 2> attention_forward_gemms(int b, int T, int C, int NH, float scale) {
  using namespace attention_plan;
  const int hs = C / NH, ld = 3 * C;
  const int64_t q = int64_t(b) * T * ld, att = int64_t(b) * NH * T * T;
  return {
      scores(rows(AttentionTensor::kAtt, att, T), rows(AttentionTensor::kQkv, q, ld),
             rows(AttentionTensor::kQkv, q + C, ld), T, hs, NH, scale),
      times_values(rows(AttentionTensor::kOut, int64_t(b) * T * C, C), rows(AttentionTensor::kAtt, att, T),
                   false, rows(AttentionTensor::kQkv, q + 2 * C, ld), T, hs, NH, 0.0f)};
}

// Sequence b's backward for heads [h0, h0 + heads): [0] dP = dO V^T into the scratch and [1] dV += P^T dO,
// then the softmax backward turns the scratch into dS, then [2] dQ += dS K and [3] dK += dS^T Q.
inline std::array<AttentionGemm, 4> attention_backward_gemms(int b, int h0, int heads, int T, int C, int NH) {
  using namespace attention_plan;
  const int hs = C / NH, ld = 3 * C;
  const int64_t column = int64_t(b) * T * ld + int64_t(h0) * hs;
  const int64_t d_o = int64_t(b) * T * C + int64_t(h0) * hs, att = (int64_t(b) * NH + h0) * T * T;
  const AttentionOperand q = rows(AttentionTensor::kQkv, column, ld);
  const AttentionOperand k = rows(AttentionTensor::kQkv, column + C, ld);
  const AttentionOperand v = rows(AttentionTensor::kQkv, column + 2 * C, ld);
  const AttentionOperand dout = rows(AttentionTensor::kDout, d_o, C),
                         ds = rows(AttentionTensor::kScratch, 0, T);
  const AttentionOperand p = rows(AttentionTensor::kAtt, att, T);
  return {scores(ds, dout, v, T, hs, heads, 1.0f),
          times_values(rows(AttentionTensor::kDqkv, column + 2 * C, ld), p, true, dout, T, hs, heads, 1.0f),
          times_values(rows(AttentionTensor::kDqkv, column, ld), ds, false, k, T, hs, heads, 1.0f),
          times_values(rows(AttentionTensor::kDqkv, column + C, ld), ds, true, q, T, hs, heads, 1.0f)};
}

}  // namespace gpt
