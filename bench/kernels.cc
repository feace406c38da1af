// Micro-benchmark of the device seam's ops at a GPT-2 shape (default 124M: B=4, T=64, C=768, NH=12,
// Vp=50304): ms per call of each case of the op-case table (kernels/cases, its timed mode) that one training
// step runs, on the backend --device names, GFLOP/s for the GEMMs, and each op's share of one training step
// (calls per step x ms); on the CPU next to Eigen's SGEMM rate on 2048^3 with the same threads. Usage:
// bench/kernels [--device cpu|cuda] [--threads N] [--reps R] [--layers L] [--batch B] [--seq T]
// [--hidden C] [--heads NH] (and the other shape flags of gpt_train: --vocab-size, --max-position-embeddings;
// see --help)
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "base/flags.h"
#include "base/main.h"
#include "kernels/backend.h"
#include "kernels/cases/op_cases.h"
#include "kernels/cases/run_case.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/threads.h"
#include "train/metrics.h"
#include "train/model_flags.h"

namespace {

using gpt::cases::OpCase;

struct Options {
  int threads = 2, reps = 10;
  std::string device = "cpu";
  gpt::GPTConfig config;
  int B = 4;
};

// Returns false when --help was printed. The shape flags are gpt_train's (with the short aliases); the
// position table grows to any --seq unless given.
bool parse(int argc, char** argv, Options& o) {
  o.config.seq_len = 64;
  gpt::FlagParser flags("bench/kernels", "Times each op of one training step at a GPT-2 shape.");
  gpt::add_bench_shape_flags(flags, &o.config, &o.B, "sequences per call");
  flags.add_int("--threads", &o.threads, "CPU threads", 1, 1024);
  flags.add_int("--reps", &o.reps, "timed calls per op (the median is shown)", 1, 1 << 20);
  flags.add_string("--device", &o.device, "the backend: cpu or cuda");
  if (!flags.parse(argc, argv)) return false;
  gpt::finish_bench_shape(flags, &o.config);
  return true;
}

// How often one training step of L layers calls the case's op (0: a variant a plain step never calls: the
// tensor-parallel slices, dropout, decoding, the fused classifier that replaces the lm_head GEMMs and the
// cross-entropy on a backend that fuses it). AdamW's case is one layer's parameters: the step updates
// params / that many.
double calls_per_step(const OpCase& c, const gpt::GPTConfig& m, int64_t adamw_elements) {
  const std::string& op = c.op;
  const int L = m.num_layers;
  for (const char* variant : {"columns", "rows", "dropout", "decode", "stats", "merge", "classifier"})
    if (op.find(variant) != std::string::npos) return 0;
  // Every residual add is in the next LayerNorm's op (the loop's BlockOutput::kPending): LayerNorm 2's into
  // its own tensor, the next block's LayerNorm 1 and the final one in place; only block 0's LayerNorm 1 reads
  // the embedding alone.
  if (op == "residual_layernorm_forward" || op == "residual_layernorm_forward in place") return L;
  if (op == "layernorm_forward") return 1;
  if (c.family == "layernorm") return 2 * L + 1;
  if (c.family == "linear") return op.find("lm_head") != std::string::npos ? 1 : L;
  if (c.family == "attention" || c.family == "gelu") return L;
  if (c.family == "residual")
    return 0;  // the residual adds are the LayerNorms' (a pipeline stage's last has one)
  if (c.family == "adamw") {
    // The engine's update at stages 0 and 3 writes the compute copy in the same call
    // (Ops::adamw_with_copy): the row a step counts, in place of the plain update's.
    if (op.find("with_copy") == std::string::npos) return 0;
    const int64_t C = m.hidden, params = (m.padded_vocab() + m.max_positions) * C +
                                         int64_t(L) * (12 * C * C + 13 * C) + 2 * C;
    return double(params) / double(adamw_elements);
  }
  return 1;  // the embedding and the loss
}

struct Row {
  std::string op;
  gpt::cases::Timing timing;
  double calls;
};

void print_rows(const std::vector<Row>& rows) {
  std::printf("%-30s %9s %8s %9s %10s %6s\n", "op", "ms", "GF/s", "calls", "step ms", "share");
  double step_ms = 0, gemm_flop = 0;
  for (const Row& r : rows) step_ms += r.calls * r.timing.ms;
  for (const Row& r : rows) {
    const double total = r.calls * r.timing.ms;
    gemm_flop += r.calls * r.timing.gflops * r.timing.ms * 1e6;
    const std::string rate = r.timing.gflops > 0 ? std::to_string(int(r.timing.gflops)) : "-";
    std::printf("%-30s %9.3f %8s %9.1f %10.1f %5.1f%%\n", r.op.c_str(), r.timing.ms, rate.c_str(), r.calls,
                total, 100 * total / step_ms);
  }
  std::printf("\nsum over one training step: %.1f ms; its GEMM work runs at %.1f GFLOP/s overall\n", step_ms,
              gemm_flop / (step_ms * 1e6));
}

int run(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, o)) return 0;
  gpt::cpu::set_num_threads(o.threads);
  const gpt::cases::Sizes sizes{o.B, o.config.seq_len, o.config.hidden, o.config.heads, o.config.vocab};
  const std::unique_ptr<gpt::Ops> backend = gpt::make_backend(o.device, 0);  // nullptr: the CPU
  gpt::Ops& ops = backend ? *backend : gpt::cpu_ops();
  std::vector<OpCase> cases = gpt::cases::op_cases(sizes);
  int64_t adamw_elements = 1;
  for (const OpCase& c : cases)
    if (c.family == "adamw") adamw_elements = c.args[0].shape[0];
  std::vector<Row> rows;
  for (const OpCase& c : cases) {
    const double calls = calls_per_step(c, o.config, adamw_elements);
    if (calls > 0) rows.push_back({c.op, gpt::cases::time_case(ops, c, o.reps), calls});
  }
  std::printf("%s ops of one training step, %s, %d layer(s), %d thread(s), median of %d calls\n",
              o.device.c_str(), sizes.describe().c_str(), o.config.num_layers, o.threads, o.reps);
  if (o.device == "cpu") std::printf("Eigen SGEMM 2048^3: %.1f GFLOP/s\n", gpt::measure_sgemm_gflops(2048));
  std::printf("\n");
  print_rows(rows);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return gpt::run_main("bench/kernels", [&] { return run(argc, argv); });
}
