// Micro-benchmark of the CPU kernels at a GPT-2 shape (default 124M: B=4, T=64, C=768, NH=12, Vp=50304):
// ms per call of each op's forward and backward, GFLOP/s for the GEMM ones, and each op's share of one
// training step (calls per step x ms), next to Eigen's SGEMM rate on 2048^3 with the same threads.
// Usage: bench/kernels [--threads N] [--reps R] [--layers L] [--batch B] [--seq T] [--hidden C] [--heads NH]
// (and the other shape flags of gpt_train: --vocab-size, --max-position-embeddings; see --help)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "base/flags.h"
#include "base/main.h"
#include "kernels/cpu/adamw.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/gelu.h"
#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/residual.h"
#include "kernels/cpu/threads.h"
#include "train/model_flags.h"

namespace {

using namespace gpt::cpu;
using Buf = std::vector<float>;

struct Options {
  int threads = 2, reps = 10, L = 12, B = 4, T = 64, C = 768, NH = 12, V = 50257, Vp = 50304, maxT = 1024;
};

// Returns false when --help was printed. The shape flags are gpt_train's (with the short aliases); the
// position table grows to any --seq unless given.
bool parse(int argc, char** argv, Options& o) {
  gpt::GPTConfig config;
  config.seq_len = o.T;
  gpt::FlagParser flags("bench/kernels", "Times each CPU kernel's forward and backward at a GPT-2 shape.");
  gpt::add_bench_shape_flags(flags, &config, &o.B, "sequences per call");
  flags.add_int("--threads", &o.threads, "CPU threads", 1, 1024);
  flags.add_int("--reps", &o.reps, "timed calls per op (the median is shown)", 1, 1 << 20);
  if (!flags.parse(argc, argv)) return false;
  gpt::finish_bench_shape(flags, &config);
  o.L = config.num_layers, o.T = config.seq_len, o.C = config.hidden, o.NH = config.heads;
  o.V = config.vocab, o.Vp = config.padded_vocab(), o.maxT = config.max_positions;
  return true;
}

Buf random_buf(int64_t n, std::mt19937& gen, float scale = 1.f) {
  std::uniform_real_distribution<float> dist(-scale, scale);
  Buf b(n);
  for (float& x : b) x = dist(gen);
  return b;
}

// Median ms per call over reps calls, after one warm-up call: the median shrugs off the calls that another
// process on this small machine happens to delay.
double time_ms(int reps, const std::function<void()>& fn) {
  fn();
  std::vector<double> ms(reps);
  for (double& m : ms) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    m = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
  std::nth_element(ms.begin(), ms.begin() + reps / 2, ms.end());
  return ms[reps / 2];
}

struct Row {
  std::string op;
  double fwd_ms, bwd_ms, fwd_flop, bwd_flop;
  int per_step;
};

int run(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, o)) return 0;
  set_num_threads(o.threads);
  const int B = o.B, T = o.T, C = o.C, NH = o.NH, V = o.V, Vp = o.Vp, L = o.L, N = B * T;
  const int64_t NC = int64_t(N) * C;
  std::mt19937 gen(1234);

  // SGEMM reference rate (what the step's MFU is measured against).
  const int S = 2048;
  Eigen::MatrixXf a = Eigen::MatrixXf::Random(S, S), b = Eigen::MatrixXf::Random(S, S), c(S, S);
  const double sgemm_ms = time_ms(3, [&] { c.noalias() = a * b; });
  const double sgemm_gflops = 2.0 * S * S * S / (sgemm_ms * 1e6);

  std::vector<Row> rows;
  const auto tokens = [&] {
    std::vector<int32_t> t(N);
    for (auto& x : t) x = int32_t(gen() % V);
    return t;
  }();
  Buf wte = random_buf(int64_t(Vp) * C, gen, 0.02f), wpe = random_buf(int64_t(o.maxT) * C, gen, 0.02f);
  Buf x = random_buf(NC, gen), y(NC), dy = random_buf(NC, gen, 1e-3f), dx(NC, 0.f);
  Buf dwte(wte.size(), 0.f), dwpe(wpe.size(), 0.f);
  rows.push_back(
      {"embedding",
       time_ms(o.reps, [&] { embedding_forward(y.data(), tokens.data(), wte.data(), wpe.data(), B, T, C); }),
       time_ms(o.reps,
               [&] { embedding_backward(dwte.data(), dwpe.data(), dy.data(), tokens.data(), B, T, C); }),
       0, 0, 1});

  Buf lw = random_buf(C, gen), lb = random_buf(C, gen), dlw(C, 0.f), dlb(C, 0.f), mean(N), rstd(N);
  rows.push_back({"layernorm",
                  time_ms(o.reps,
                          [&] {
                            layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), lw.data(),
                                              lb.data(), N, C);
                          }),
                  time_ms(o.reps,
                          [&] {
                            layernorm_backward(dx.data(), dlw.data(), dlb.data(), dy.data(), x.data(),
                                               lw.data(), mean.data(), rstd.data(), N, C);
                          }),
                  0, 0, 2 * L + 1});

  // The four linear layers of a block, and the LM head (tied wte, no bias).
  struct Lin {
    const char* name;
    int in, out;
    bool bias;
    int per_step;
  };
  for (const Lin& l : {Lin{"linear qkv", C, 3 * C, true, L}, Lin{"linear attn proj", C, C, true, L},
                       Lin{"linear fc", C, 4 * C, true, L}, Lin{"linear fc proj", 4 * C, C, true, L},
                       Lin{"linear lm head", C, Vp, false, 1}}) {
    Buf in = random_buf(int64_t(N) * l.in, gen), w = random_buf(int64_t(l.out) * l.in, gen, 0.02f);
    Buf bias = random_buf(l.out, gen), out(int64_t(N) * l.out),
        dout = random_buf(int64_t(N) * l.out, gen, 1e-3f);
    Buf din(in.size(), 0.f), dw(w.size(), 0.f), dbias(l.out, 0.f);
    const double flop = 2.0 * N * l.in * l.out;
    rows.push_back({l.name,
                    time_ms(o.reps,
                            [&] {
                              linear_forward(out.data(), in.data(), w.data(), l.bias ? bias.data() : nullptr,
                                             N, l.in, l.out);
                            }),
                    time_ms(o.reps,
                            [&] {
                              linear_backward(din.data(), dw.data(), l.bias ? dbias.data() : nullptr,
                                              dout.data(), in.data(), w.data(), N, l.in, l.out);
                            }),
                    flop, 2 * flop, l.per_step});
  }

  {
    Buf qkv = random_buf(3 * NC, gen), att(int64_t(B) * NH * T * T), dqkv(3 * NC, 0.f);
    const double flop = 4.0 * B * NH * T * T * (C / NH);  // Q K^T and A V, full T x T
    rows.push_back(
        {"attention",
         time_ms(o.reps, [&] { attention_forward(y.data(), att.data(), qkv.data(), B, T, C, NH); }),
         time_ms(o.reps,
                 [&] { attention_backward(dqkv.data(), dy.data(), qkv.data(), att.data(), B, T, C, NH); }),
         flop, 2 * flop, L});
  }
  {
    const int64_t n = 4 * NC;
    Buf h = random_buf(n, gen, 3.f), g(n), dg = random_buf(n, gen), dh(n, 0.f);
    rows.push_back({"gelu", time_ms(o.reps, [&] { gelu_forward(g.data(), h.data(), n); }),
                    time_ms(o.reps, [&] { gelu_backward(dh.data(), h.data(), dg.data(), n); }), 0, 0, L});
  }
  Buf x2 = random_buf(NC, gen), dx2(NC, 0.f);
  rows.push_back({"residual", time_ms(o.reps, [&] { residual_forward(y.data(), x.data(), x2.data(), NC); }),
                  time_ms(o.reps, [&] { residual_backward(dx.data(), dx2.data(), dy.data(), NC); }), 0, 0,
                  2 * L});
  {
    Buf logits = random_buf(int64_t(N) * Vp, gen, 4.f), probs(logits.size()), losses(N), dlosses(N, 1.f / N);
    std::vector<int32_t> targets(tokens.rbegin(), tokens.rend());
    rows.push_back({"cross-entropy",
                    time_ms(o.reps,
                            [&] {
                              softmax_cross_entropy_forward(losses.data(), probs.data(), logits.data(),
                                                            targets.data(), N, V, Vp);
                            }),
                    time_ms(o.reps,
                            [&] {
                              softmax_cross_entropy_backward(probs.data(), probs.data(), targets.data(),
                                                             dlosses.data(), N, V, Vp);
                            }),
                    0, 0, 1});
  }
  {
    // AdamW over every parameter of the model (wte, wpe, L blocks, final LayerNorm), as one flat buffer.
    const int64_t params =
        int64_t(Vp) * C + int64_t(o.maxT) * C + int64_t(L) * (12LL * C * C + 13LL * C) + 2LL * C;
    Buf p = random_buf(params, gen, 0.02f), g = random_buf(params, gen, 1e-3f), m(params, 0.f),
        v(params, 0.f);
    int64_t step = 0;
    const AdamWHyper hyper{.lr = 1e-4, .weight_decay = 0.1};
    const int reps = std::max(3, o.reps / 2);
    rows.push_back(
        {"adamw (" + std::to_string(params / 1000000) + "M params)", 0,
         time_ms(reps, [&] { adamw_update(p.data(), g.data(), m.data(), v.data(), params, hyper, ++step); }),
         0, 0, 1});
  }

  std::printf("CPU kernels, B=%d T=%d C=%d NH=%d Vp=%d, %d thread(s), median of %d calls\n", B, T, C, NH, Vp,
              o.threads, o.reps);
  std::printf("Eigen SGEMM 2048^3: %.1f GFLOP/s\n\n", sgemm_gflops);
  std::printf("%-22s %9s %9s %8s %8s %7s %10s %6s\n", "op", "fwd ms", "bwd ms", "fwd GF/s", "bwd GF/s",
              "calls", "step ms", "share");
  double step_ms = 0;
  for (const Row& r : rows) step_ms += r.per_step * (r.fwd_ms + r.bwd_ms);
  for (const Row& r : rows) {
    const double total = r.per_step * (r.fwd_ms + r.bwd_ms);
    auto rate = [](double flop, double ms) {
      return flop > 0 ? std::to_string(int(flop / (ms * 1e6))) : "-";
    };
    std::printf("%-22s %9.3f %9.3f %8s %8s %7d %10.1f %5.1f%%\n", r.op.c_str(), r.fwd_ms, r.bwd_ms,
                rate(r.fwd_flop, r.fwd_ms).c_str(), rate(r.bwd_flop, r.bwd_ms).c_str(), r.per_step, total,
                100 * total / step_ms);
  }
  double gemm_flop = 0;
  for (const Row& r : rows) gemm_flop += r.per_step * (r.fwd_flop + r.bwd_flop);
  std::printf(
      "\nsum over one training step: %.1f ms; its GEMM work runs at %.1f GFLOP/s overall = %.2f of SGEMM\n",
      step_ms, gemm_flop / (step_ms * 1e6), gemm_flop / (step_ms * 1e6) / sgemm_gflops);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return gpt::run_main("bench/kernels", [&] { return run(argc, argv); });
}
