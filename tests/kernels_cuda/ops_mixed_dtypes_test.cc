// CudaOps' mixed-precision contract of the layer ops (kernels/ops.h): which dtype combinations each op takes
// and the one-line UnsupportedOp it throws for any other, the activations' dtype each backend asks the layer
// loop for (Ops::compute_dtype), and the fp32 scratch the fp32-only kernels run half tensors through
// (aliased tensors, as an in-place op or probs over logits, share it). The values of each op in fp16 and
// bf16 against the CPU's fp64 reference are op_cases_test's and scripts/gpu_check's. Without a device only
// the CPU's answers are checked and it prints a SKIPPED: line.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "tensor/half.h"
#include "tests/kernels_cuda/backends.h"

using gpt::DType;
using gpt::Tensor;
using gpt::testing::Backends;
using gpt::testing::have_device;

namespace {

constexpr DType kF32 = DType::kF32, kF16 = DType::kF16, kBF16 = DType::kBF16;

Tensor make(Backends& b, std::vector<int64_t> shape, DType dtype) {
  Tensor like;
  like.shape = std::move(shape);
  return b.make_like(like, dtype);
}

// Runs `call`, which must throw UnsupportedOp: one line naming the op and each of `dtypes` ("x f16").
template <typename Call>
void check_refused(const std::string& op, std::vector<std::string> dtypes, Call&& call) {
  std::string message;
  try {
    call();
  } catch (const gpt::UnsupportedOp& e) {
    message = e.what();
  }
  INFO(op << ": " << message);
  REQUIRE(!message.empty());
  CHECK(message.find("CudaOps::" + op + ":") == 0);
  CHECK(message.find('\n') == std::string::npos);
  for (const std::string& d : dtypes) CHECK(message.find(d) != std::string::npos);
}

}  // namespace

TEST_CASE("the layer loop's activation dtype: the compute dtype on CUDA for fp16 and bf16, else fp32") {
  gpt::Ops& cpu = gpt::cpu_ops();
  CHECK(cpu.compute_dtype(kBF16) == kF32);
  CHECK(cpu.compute_dtype(kF16) == kF32);
  CHECK(cpu.compute_dtype(kF32) == kF32);
  CHECK(cpu.compute_dtype(DType::kF64) == DType::kF64);
  if (!have_device()) return;
  gpt::cuda::CudaOps gpu(0);
  CHECK(gpu.compute_dtype(kBF16) == kBF16);
  CHECK(gpu.compute_dtype(kF16) == kF16);
  CHECK(gpu.compute_dtype(kF32) == kF32);
  CHECK(gpu.compute_dtype(DType::kF64) == DType::kF64);
}

TEST_CASE("CudaOps refuses every dtype mix outside the contract with one line naming the op and dtypes") {
  if (!have_device()) return;
  Backends b;
  gpt::Ops& o = b.gpu;
  const int64_t N = 8, C = 16;
  const Tensor x16 = make(b, {N, C}, kF16), y16 = make(b, {N, C}, kF16), xb = make(b, {N, C}, kBF16);
  const Tensor w16 = make(b, {C}, kF16), wb = make(b, {C}, kBF16), w32 = make(b, {C}, kF32);
  const Tensor rows32 = make(b, {N}, kF32), rows16 = make(b, {N}, kF16);
  check_refused("layernorm_forward", {"out bf16", "x f16"},
                [&] { o.layernorm_forward(xb, rows32, rows32, x16, w16, w16); });
  check_refused("layernorm_forward", {"mean f16"},
                [&] { o.layernorm_forward(y16, rows16, rows32, x16, w16, w16); });
  check_refused("layernorm_backward", {"dw bf16"},
                [&] { o.layernorm_backward(xb, wb, w32, xb, xb, wb, rows32, rows32); });
  const Tensor lw16 = make(b, {C, C}, kF16), lw32 = make(b, {C, C}, kF32);
  check_refused("linear_forward", {"w f32", "x f16"}, [&] { o.linear_forward(y16, x16, lw32, Tensor{}); });
  check_refused("linear_backward", {"dw f16"},
                [&] { o.linear_backward(y16, lw16, Tensor{}, y16, x16, lw16); });
  check_refused("linear_forward_columns", {"b bf16"},
                [&] { o.linear_forward_columns(y16, 0, x16, lw16, wb); });
  check_refused("gelu_forward", {"out bf16"}, [&] { o.gelu_forward(xb, x16); });
  check_refused("gelu_backward", {"dout bf16"}, [&] { o.gelu_backward(y16, x16, xb); });
  check_refused("add", {"b bf16"}, [&] { o.add(y16, x16, xb); });
  const uint64_t keys[N] = {};
  check_refused("dropout_forward", {"out bf16"}, [&] {
    o.dropout_forward(xb, x16, gpt::DropoutMask{0.1, keys});
  });
  check_refused("dropout_backward", {"dx bf16"}, [&] {
    o.dropout_backward(xb, x16, gpt::DropoutMask{0.1, keys});
  });
}

TEST_CASE(
    "the embedding, attention and cross-entropy keep their fp32 tensors fp32 and the rest in one dtype") {
  if (!have_device()) return;
  Backends b;
  gpt::Ops& o = b.gpu;
  const int64_t B = 1, T = 4, C = 8, NH = 2, V = 16;
  const Tensor tokens = make(b, {B, T}, DType::kI32);
  const Tensor act16 = make(b, {B, T, C}, kF16), table16 = make(b, {V, C}, kF16),
               pos16 = make(b, {T, C}, kF16);
  const Tensor table32 = make(b, {V, C}, kF32), tableb = make(b, {V, C}, kBF16),
               pos32 = make(b, {T, C}, kF32);
  check_refused("embedding_forward", {"wte bf16"},
                [&] { o.embedding_forward(act16, tokens, tableb, pos16); });
  check_refused("embedding_backward", {"dwte f16"},
                [&] { o.embedding_backward(table16, pos32, act16, tokens); });
  check_refused("embedding_forward_rows", {"wpe f32"},
                [&] { o.embedding_forward_rows(act16, tokens, table16, 0, pos32); });
  check_refused("embedding_backward_rows", {"dwpe f16"},
                [&] { o.embedding_backward_rows(table32, 0, pos16, act16, tokens); });
  const Tensor qkv = make(b, {B, T, 3 * C}, kBF16), outb = make(b, {B, T, C}, kBF16);
  // The log-sum-exp is fp32 beside half activations.
  const Tensor att32 = make(b, {B, NH, T}, kF32), attb = make(b, {B, NH, T}, kBF16);
  check_refused("attention_forward", {"att bf16", "qkv bf16"},
                [&] { o.attention_forward(outb, attb, qkv, nullptr); });
  check_refused("attention_backward", {"dout f16"},
                [&] { o.attention_backward(qkv, act16, qkv, outb, att32, nullptr); });
  const Tensor decode_att = make(b, {NH, T}, kF16), qkv_rows = make(b, {T, 3 * C}, kBF16);
  check_refused("attention_decode", {"att f16"}, [&] {
    o.attention_decode(make(b, {1, C}, kBF16), decode_att, qkv_rows);
  });
  const Tensor targets = make(b, {T}, DType::kI32), logits = make(b, {T, V}, kBF16);
  const Tensor losses16 = make(b, {T}, kF16), losses32 = make(b, {T}, kF32), probs16 = make(b, {T, V}, kF16);
  check_refused("cross_entropy_forward", {"losses f16"},
                [&] { o.cross_entropy_forward(losses16, logits, logits, targets, int(V)); });
  check_refused("cross_entropy_forward", {"probs f16", "logits bf16"},
                [&] { o.cross_entropy_forward(losses32, probs16, logits, targets, int(V)); });
  check_refused("cross_entropy_backward", {"dlosses f16"},
                [&] { o.cross_entropy_backward(logits, logits, targets, losses16, int(V)); });
  check_refused("cross_entropy_stats", {"stats bf16"}, [&] {
    o.cross_entropy_stats(make(b, {T, 3}, kBF16), logits, targets, 0, int(V));
  });
  check_refused("cross_entropy_merge", {"probs f16"}, [&] {
    o.cross_entropy_merge(losses32, probs16, logits, make(b, {1, T, 3}, kF32), 0, int(V));
  });
  check_refused("cross_entropy_backward_columns", {"dlogits f16"},
                [&] { o.cross_entropy_backward_columns(probs16, logits, targets, losses32, 0, int(V)); });
}

TEST_CASE("fp64 stays the CPU's: CudaOps' layer ops refuse it as not supported") {
  if (!have_device()) return;
  Backends b;
  const Tensor x = make(b, {4, 8}, DType::kF64), y = make(b, {4, 8}, DType::kF64);
  check_refused("gelu_forward", {"x f64"}, [&] { b.gpu.gelu_forward(y, x); });
  check_refused("add", {"a f64"}, [&] { b.gpu.add(y, x, x); });
}

namespace {

// Host values rounded to dtype's bits, uploaded to a new tensor.
Tensor upload_half(Backends& b, const std::vector<float>& values, std::vector<int64_t> shape, DType dtype) {
  std::vector<uint16_t> bits(values.size());
  for (size_t i = 0; i < values.size(); ++i)
    bits[i] = dtype == kF16 ? gpt::f32_to_f16(values[i]) : gpt::f32_to_bf16(values[i]);
  const Tensor t = make(b, std::move(shape), dtype);
  b.gpu.upload(t, bits.data());
  return t;
}

}  // namespace

TEST_CASE("half tensors at one address share their fp32 scratch: in place equals out of place, bit for bit") {
  if (!have_device()) return;
  Backends b;
  const int64_t N = 6, V = 40;
  const std::vector<float> values = gpt::testing::random_values(size_t(N * V), 7);
  std::vector<int32_t> ids(N);
  for (int64_t i = 0; i < N; ++i) ids[size_t(i)] = int32_t(i * 5 % V);
  const Tensor targets = make(b, {N}, DType::kI32);
  b.gpu.upload(targets, ids.data());
  for (DType dtype : {kF16, kBF16}) {
    const Tensor logits = upload_half(b, values, {N, V}, dtype),
                 aliased = upload_half(b, values, {N, V}, dtype);
    const Tensor probs = make(b, {N, V}, dtype), losses = make(b, {N}, kF32), losses2 = make(b, {N}, kF32);
    b.gpu.cross_entropy_forward(losses, probs, logits, targets, int(V) - 3);
    b.gpu.cross_entropy_forward(losses2, aliased, aliased, targets, int(V) - 3);
    CHECK(b.host<uint16_t>(b.gpu, probs) == b.host<uint16_t>(b.gpu, aliased));
    CHECK(b.host<float>(b.gpu, losses) == b.host<float>(b.gpu, losses2));
    const std::vector<uint64_t> keys = {1, 2, 3, 4, 5, 6};
    const gpt::DropoutMask mask{0.25, keys.data()};
    const Tensor x = upload_half(b, values, {N, V}, dtype), in_place = upload_half(b, values, {N, V}, dtype);
    const Tensor out = make(b, {N, V}, dtype);
    b.gpu.dropout_forward(out, x, mask);
    b.gpu.dropout_forward(in_place, in_place, mask);
    CHECK(b.host<uint16_t>(b.gpu, out) == b.host<uint16_t>(b.gpu, in_place));
    b.gpu.add(x, x, x);  // out aliasing both inputs: 2x, exact in any binary format
    std::vector<uint16_t> doubled = b.host<uint16_t>(b.gpu, x);
    const Tensor twice = upload_half(b, values, {N, V}, dtype);
    b.gpu.add(out, twice, twice);
    CHECK(doubled == b.host<uint16_t>(b.gpu, out));
  }
}
