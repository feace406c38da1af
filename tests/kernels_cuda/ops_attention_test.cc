// CudaOps' causal multi-head attention (the flash kernels, keeping the log-sum-exp [B,NH,T]) beyond the
// op-case table (op_cases_test: forward and backward with and without dropout against the fp64 reference,
// head sizes 64 and 128, partial 64-row tiles), against the CPU's flash attention (kernels/cpu/
// flash_cpu_ops.h, the same tile order): att holds the log-sum-exp before dropout, bit for bit that of the
// call without dropout; p = 0 is the call without dropout; reruns repeat bit for bit; the host keys may be
// overwritten once the call returns; more than 128 sequences (several launches) within fp32 tolerance of the
// CPU (max |gpu - cpu| / max |cpu| <= 1e-5; a wrong mask is an O(1) error); other head sizes are refused;
// decode against CpuOps and, at the flash kernels' head sizes, the forward's last row. Without a device it
// prints SKIPPED: and passes.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/cpu/flash_cpu_ops.h"
#include "tests/kernels_cuda/backends.h"

using gpt::testing::Backends;
using gpt::testing::have_device;
using gpt::testing::Pair;
using gpt::testing::random_values;

namespace {

constexpr double kTolerance = 1e-5;

struct Dims {
  int B, T, C, NH;
};

std::vector<uint64_t> make_keys(int B) {
  std::vector<uint64_t> keys(B);
  for (int b = 0; b < B; ++b) keys[b] = 0x9E3779B97F4A7C15ULL * uint64_t(b + 1) + 12345;
  return keys;
}

// max |gpu - cpu| / max |cpu|.
double normwise_error(const std::vector<float>& cpu, const std::vector<float>& gpu) {
  REQUIRE(cpu.size() == gpu.size());
  double worst = 0, scale = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    worst = std::max(worst, std::fabs(double(cpu[i]) - double(gpu[i])));
    scale = std::max(scale, std::fabs(double(cpu[i])));
  }
  return scale > 0 ? worst / scale : worst;
}

void check_close(Backends& b, const char* what, const Pair& t) {
  const double error = normwise_error(b.host<float>(b.cpu, t.cpu), b.host<float>(b.gpu, t.gpu));
  INFO(what << ": max |gpu - cpu| / max |cpu| = " << error);
  CHECK(error <= kTolerance);
}

// The tensors of one attention call on both backends; dqkv starts nonzero, to check that it is overwritten.
struct AttentionCase {
  AttentionCase(Backends& b, Dims d, uint32_t seed)
      : qkv(b.make(random_values(size_t(d.B) * d.T * 3 * d.C, seed), {d.B, d.T, 3 * d.C})),
        dout(b.make(random_values(size_t(d.B) * d.T * d.C, seed + 1), {d.B, d.T, d.C})),
        dqkv(b.make(random_values(size_t(d.B) * d.T * 3 * d.C, seed + 2), {d.B, d.T, 3 * d.C})),
        out(b.make(std::vector<float>(size_t(d.B) * d.T * d.C), {d.B, d.T, d.C})),
        att(b.make(std::vector<float>(size_t(d.B) * d.NH * d.T, -1.0f), {d.B, d.NH, d.T})) {}
  Pair qkv, dout, dqkv, out, att;
};

// Forward and backward on the GPU and the CPU's flash attention; the GPU's copy of the keys is scribbled over
// after each call, so a kernel that read the host array late would see wrong keys.
void run_both(Backends& b, AttentionCase& c, const gpt::DropoutMask* dropout) {
  gpt::FlashCpuOps flash;
  std::vector<uint64_t> gpu_keys;
  gpt::DropoutMask gpu_mask;
  if (dropout) {
    gpu_keys.assign(dropout->keys, dropout->keys + c.att.cpu.shape[0]);
    gpu_mask = {dropout->p, gpu_keys.data()};
  }
  flash.attention_forward(c.out.cpu, c.att.cpu, c.qkv.cpu, dropout);
  b.gpu.attention_forward(c.out.gpu, c.att.gpu, c.qkv.gpu, dropout ? &gpu_mask : nullptr);
  std::fill(gpu_keys.begin(), gpu_keys.end(), 0);
  flash.attention_backward(c.dqkv.cpu, c.dout.cpu, c.qkv.cpu, c.out.cpu, c.att.cpu, dropout);
  if (dropout) std::copy(dropout->keys, dropout->keys + gpu_keys.size(), gpu_keys.begin());
  b.gpu.attention_backward(c.dqkv.gpu, c.dout.gpu, c.qkv.gpu, c.out.gpu, c.att.gpu,
                           dropout ? &gpu_mask : nullptr);
  std::fill(gpu_keys.begin(), gpu_keys.end(), 0);
  b.gpu.synchronize();
}

void check_attention(Dims d, const gpt::DropoutMask* dropout, uint32_t seed) {
  Backends b;
  AttentionCase c(b, d, seed);
  run_both(b, c, dropout);
  INFO("B=" << d.B << " T=" << d.T << " C=" << d.C << " NH=" << d.NH << " p=" << (dropout ? dropout->p : 0));
  check_close(b, "out", c.out);
  check_close(b, "att", c.att);
  check_close(b, "dqkv", c.dqkv);
}

}  // namespace

TEST_CASE(
    "CudaOps attention: the log-sum-exp before dropout, p = 0 is no dropout, reruns repeat bit for bit") {
  if (!have_device()) return;
  Backends b;
  const Dims d{2, 100, 128, 2};
  const std::vector<uint64_t> keys = make_keys(d.B);
  const gpt::DropoutMask dropped{0.2, keys.data()}, zero{0.0, keys.data()};
  AttentionCase c(b, d, 7);
  const auto forward = [&](const gpt::DropoutMask* mask) {
    b.gpu.attention_forward(c.out.gpu, c.att.gpu, c.qkv.gpu, mask);
    return std::pair{b.host<float>(b.gpu, c.out.gpu), b.host<float>(b.gpu, c.att.gpu)};
  };
  const auto backward = [&](const gpt::DropoutMask* mask) {
    b.gpu.upload(c.dqkv.gpu, random_values(size_t(d.B) * d.T * 3 * d.C, 9).data());
    b.gpu.attention_backward(c.dqkv.gpu, c.dout.gpu, c.qkv.gpu, c.out.gpu, c.att.gpu, mask);
    return b.host<float>(b.gpu, c.dqkv.gpu);
  };
  const auto plain = forward(nullptr);
  const auto plain_grad = backward(nullptr);
  CHECK(forward(&zero) == plain);
  CHECK(backward(&zero) == plain_grad);
  const auto with_dropout = forward(&dropped);
  CHECK(with_dropout.second == plain.second);  // att keeps the log-sum-exp before dropout
  CHECK(with_dropout.first != plain.first);
  const auto grad = backward(&dropped);
  CHECK(forward(&dropped) == with_dropout);
  CHECK(backward(&dropped) == grad);
}

TEST_CASE("CudaOps attention over more sequences than one launch takes keys for") {
  if (!have_device()) return;
  const std::vector<uint64_t> keys = make_keys(300);
  const gpt::DropoutMask mask{0.3, keys.data()};
  check_attention({300, 5, 128, 2}, &mask, 500);
}

TEST_CASE("CudaOps attention: the flash kernels' head sizes, 64 and 128, both hold; others are refused") {
  if (!have_device()) return;
  check_attention({2, 130, 256, 2}, nullptr, 600);  // head size 128, a partial last tile
  check_attention({1, 65, 128, 2}, nullptr, 700);   // head size 64, one row past a tile
  Backends b;
  AttentionCase c(b, {1, 8, 48, 4}, 800);  // head size 12
  CHECK_THROWS(b.gpu.attention_forward(c.out.gpu, c.att.gpu, c.qkv.gpu, nullptr));
}

TEST_CASE("CudaOps attention decode agrees with CpuOps and with the forward's last row") {
  if (!have_device()) return;
  Backends b;
  for (const Dims d : {Dims{1, 1, 48, 4}, Dims{1, 37, 48, 4}, Dims{1, 300, 768, 12}, Dims{1, 70, 256, 2}}) {
    const int n = d.T, C = d.C, NH = d.NH;
    INFO("n=" << n << " C=" << C << " NH=" << NH);
    Pair qkv = b.make(random_values(size_t(n) * 3 * C, uint32_t(n + C)), {n, 3 * C});
    Pair out = b.make(std::vector<float>(C), {1, C}),
         att = b.make(std::vector<float>(size_t(NH) * n), {NH, n});
    b.cpu.attention_decode(out.cpu, att.cpu, qkv.cpu);
    b.gpu.attention_decode(out.gpu, att.gpu, qkv.gpu);
    check_close(b, "decode out", out);
    check_close(b, "decode att", att);

    if (C / NH != 64 && C / NH != 128) continue;  // the flash kernels' head sizes
    Pair full_out = b.make(std::vector<float>(size_t(n) * C), {1, n, C});
    Pair full_att = b.make(std::vector<float>(size_t(NH) * n), {1, NH, n});
    b.gpu.attention_forward(full_out.gpu, full_att.gpu, qkv.gpu, nullptr);
    const std::vector<float> rows = b.host<float>(b.gpu, full_out.gpu);
    const std::vector<float> last(rows.end() - C, rows.end());
    const double error = normwise_error(last, b.host<float>(b.gpu, out.gpu));
    INFO("decode against the forward's last row: " << error);
    CHECK(error <= kTolerance);
  }
}
