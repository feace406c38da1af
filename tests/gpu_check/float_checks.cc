// The float ops of the device seam, CudaOps against CpuOps at GPT-2 124M's shapes: fp32 within 1e-5 of the
// CPU (relative to its largest magnitude), and with the GPU's inputs rounded to fp16 (1e-2) and bf16 (4e-2).
#include <algorithm>
#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "tests/gpu_check/checks.h"

namespace gpt::gpu_check {
namespace {

struct Variant {
  DType dtype;
  const char* label;
  double tolerance;
};
constexpr Variant kVariants[] = {{DType::kF32, "fp32", kF32Tolerance},
                                 {DType::kF16, "fp16", kF16Tolerance},
                                 {DType::kBF16, "bf16", kBF16Tolerance}};

void reset_all(Scratch& scratch, const FloatCase& c, bool gpu_side) {
  for (const Twin* t : c.inputs) scratch.reset(*t, gpu_side);
  for (const Twin* t : c.others) scratch.reset(*t, gpu_side);
  for (const auto& [name, t] : c.outputs) scratch.reset(*t, gpu_side);
}

// The GPU run of one variant against the CPU's outputs: one row per output.
void compare_variant(Table& table, Scratch& scratch, const FloatCase& c, const Variant& v,
                     const std::vector<std::vector<float>>& expected) {
  try {
    reset_all(scratch, c, true);
    if (v.dtype != DType::kF32)
      for (const Twin* t : c.inputs) scratch.round_on_gpu(*t, v.dtype);
    c.run(scratch.backends().gpu, true);
    for (size_t i = 0; i < c.outputs.size(); ++i) {
      const double error = max_relative_error(expected[i], scratch.floats(*c.outputs[i].second, true));
      table.add(Row{c.op + " " + c.outputs[i].first, v.label, c.shape, scientific(error),
                    "<= " + scientific(v.tolerance), error <= v.tolerance});
    }
  } catch (const std::exception& e) {
    table.add_failure(c.op, v.label, c.shape, e.what());
  }
}

}  // namespace

void check_float_op(Table& table, Scratch& scratch, const FloatCase& c) {
  std::vector<std::vector<float>> expected;
  try {
    reset_all(scratch, c, false);
    c.run(scratch.backends().cpu, false);
    for (const auto& [name, t] : c.outputs) expected.push_back(scratch.floats(*t, false));
  } catch (const std::exception& e) {
    table.add_failure(c.op + " (CPU reference)", "fp32", c.shape, e.what());
    return;
  }
  for (const Variant& v : kVariants) {
    if (v.dtype != DType::kF32 && !c.half_variants) break;
    compare_variant(table, scratch, c, v, expected);
  }
}

namespace {
// The vocabulary-parallel embedding on the second of two slices of the table (rows [Vp/2, Vp)), the position
// term with it (forward and backward) and without it (forward).
void check_embedding_rows(Table& table, Scratch& x, const Shapes& s, const Twin& tokens, const Twin& wpe,
                          const Twin& dout) {
  const int64_t R = s.Vp / 2, first = s.Vp - R;
  const Twin& wte = x.random({R, s.C}, 6, 0.02f);
  const Twin& out = x.random({s.B, s.T, s.C}, 7);
  const std::string shape = shape_string(out.cpu.shape) + " rows 2/2";
  for (bool positions : {true, false}) {
    std::vector<const Twin*> inputs = {&wte};
    if (positions) inputs.push_back(&wpe);
    check_float_op(table, x,
                   {std::string("embedding_forward_rows") + (positions ? "" : " no wpe"),
                    shape,
                    inputs,
                    {{"out", &out}},
                    {&tokens},
                    [&](Ops& ops, bool g) {
                      ops.embedding_forward_rows(out.on(g), tokens.on(g), wte.on(g), first,
                                                 positions ? wpe.on(g) : Tensor{});
                    }});
  }
  check_float_op(table, x,
                 {"embedding_backward_rows",
                  shape,
                  {&dout},
                  {{"dwte", &wte}, {"dwpe", &wpe}},
                  {&tokens},
                  [&](Ops& ops, bool g) {
                    ops.embedding_backward_rows(wte.on(g), first, wpe.on(g), dout.on(g), tokens.on(g));
                  }});
}
}  // namespace

void check_embedding(Table& table, Backends& backends, const Shapes& s) {
  Scratch x(backends);
  const Twin& tokens = x.tokens({s.B, s.T}, s.V, 1);
  const Twin& wte = x.random({s.Vp, s.C}, 2, 0.02f);
  const Twin& wpe = x.random({s.T, s.C}, 3, 0.01f);
  const Twin& out = x.random({s.B, s.T, s.C}, 4);
  check_float_op(
      table, x,
      {"embedding_forward",
       shape_string(out.cpu.shape),
       {&wte, &wpe},
       {{"out", &out}},
       {&tokens},
       [&](Ops& ops, bool g) { ops.embedding_forward(out.on(g), tokens.on(g), wte.on(g), wpe.on(g)); }});
  const Twin& dout = x.random({s.B, s.T, s.C}, 5);
  check_float_op(
      table, x,
      {"embedding_backward",
       shape_string(dout.cpu.shape),
       {&dout},
       {{"dwte", &wte}, {"dwpe", &wpe}},
       {&tokens},
       [&](Ops& ops, bool g) { ops.embedding_backward(wte.on(g), wpe.on(g), dout.on(g), tokens.on(g)); }});
  check_embedding_rows(table, x, s, tokens, wpe, dout);
}

void check_layernorm(Table& table, Backends& backends, const Shapes& s) {
  Scratch x(backends);
  const int64_t N = s.N(), C = s.C;
  const Twin& in = x.random({N, C}, 11, 2.0f);
  const Twin& w = x.random({C}, 12, 0.5f);
  const Twin& b = x.random({C}, 13, 0.1f);
  const Twin& out = x.random({N, C}, 14);
  const Twin& mean = x.random({N}, 15);
  const Twin& rstd = x.random({N}, 16);
  check_float_op(table, x,
                 {"layernorm_forward",
                  shape_string({N, C}),
                  {&in, &w, &b},
                  {{"out", &out}, {"mean", &mean}, {"rstd", &rstd}},
                  {},
                  [&](Ops& ops, bool g) {
                    ops.layernorm_forward(out.on(g), mean.on(g), rstd.on(g), in.on(g), w.on(g), b.on(g));
                  }});
  // The backward's statistics are the CPU forward's.
  backends.cpu.layernorm_forward(out.cpu, mean.cpu, rstd.cpu, in.cpu, w.cpu, b.cpu);
  const Twin& saved_mean = x.values({N}, x.floats(mean, false));
  const Twin& saved_rstd = x.values({N}, x.floats(rstd, false));
  const Twin& dout = x.random({N, C}, 17);
  const Twin& dx = x.random({N, C}, 18);
  const Twin& dw = x.random({C}, 19);
  const Twin& db = x.random({C}, 20);
  check_float_op(table, x,
                 {"layernorm_backward",
                  shape_string({N, C}),
                  {&dout, &in, &w},
                  {{"dx", &dx}, {"dw", &dw}, {"db", &db}},
                  {&saved_mean, &saved_rstd},
                  [&](Ops& ops, bool g) {
                    ops.layernorm_backward(dx.on(g), dw.on(g), db.on(g), dout.on(g), in.on(g), w.on(g),
                                           saved_mean.on(g), saved_rstd.on(g));
                  }});
}

namespace {
// One of the model's linear layers: forward, then backward accumulating into random gradients.
void check_linear_shape(Table& table, Backends& backends, const std::string& name, int64_t N, int64_t IC,
                        int64_t OC, bool bias) {
  Scratch x(backends);
  const Twin& in = x.random({N, IC}, 21);
  const Twin& w = x.random({OC, IC}, 22, 0.02f);
  const Twin& b = bias ? x.random({OC}, 23, 0.02f) : x.raw({0}, DType::kF32, {});
  const Twin& out = x.random({N, OC}, 24);
  const std::string shape = shape_string({N, IC}) + "x" + std::to_string(OC);
  std::vector<const Twin*> inputs = {&in, &w};
  if (bias) inputs.push_back(&b);
  auto bias_of = [&](bool g) { return bias ? b.on(g) : Tensor{}; };
  check_float_op(table, x,
                 {"linear_forward " + name, shape, inputs, {{"out", &out}}, {}, [&](Ops& ops, bool g) {
                    ops.linear_forward(out.on(g), in.on(g), w.on(g), bias_of(g));
                  }});
  const Twin& dout = x.random({N, OC}, 25, 0.1f);
  const Twin& dx = x.random({N, IC}, 26);
  const Twin& dw = x.random({OC, IC}, 27);
  const Twin& db = bias ? x.random({OC}, 28) : x.raw({0}, DType::kF32, {});
  std::vector<std::pair<std::string, const Twin*>> outputs = {{"dx", &dx}, {"dw", &dw}};
  if (bias) outputs.push_back({"db", &db});
  check_float_op(table, x,
                 {"linear_backward " + name, shape, {&dout, &in, &w}, outputs, {}, [&](Ops& ops, bool g) {
                    ops.linear_backward(dx.on(g), dw.on(g), bias ? db.on(g) : Tensor{}, dout.on(g), in.on(g),
                                        w.on(g));
                  }});
}

// Memory-centric tiling's ops: the second of two tiles of fc (4C output rows), writing and reading the tile's
// columns of the whole layer's [N, 4C] tensors (a leading dimension of 4C on the GPU).
void check_linear_columns(Table& table, Backends& backends, int64_t N, int64_t C) {
  Scratch x(backends);
  const int64_t OC = 4 * C, W = OC / 2, first = OC - W;
  const Twin& in = x.random({N, C}, 41);
  const Twin& w = x.random({W, C}, 42, 0.02f);
  const Twin& b = x.random({W}, 43, 0.02f);
  const Twin& out = x.random({N, OC}, 44);
  const std::string shape = shape_string({N, C}) + "x" + std::to_string(OC) + " tile 2/2";
  check_float_op(
      table, x,
      {"linear_forward_columns fc", shape, {&in, &w, &b}, {{"out", &out}}, {}, [&](Ops& ops, bool g) {
         ops.linear_forward_columns(out.on(g), first, in.on(g), w.on(g), b.on(g));
       }});
  const Twin& dout = x.random({N, OC}, 45, 0.1f);
  const Twin& dx = x.random({N, C}, 46);
  const Twin& dw = x.random({W, C}, 47);
  const Twin& db = x.random({W}, 48);
  check_float_op(table, x,
                 {"linear_backward_columns fc",
                  shape,
                  {&dout, &in, &w},
                  {{"dx", &dx}, {"dw", &dw}, {"db", &db}},
                  {},
                  [&](Ops& ops, bool g) {
                    ops.linear_backward_columns(dx.on(g), dw.on(g), db.on(g), dout.on(g), first, in.on(g),
                                                w.on(g));
                  }});
}
}  // namespace

void check_linear(Table& table, Backends& backends, const Shapes& s) {
  const int64_t N = s.N(), C = s.C;
  check_linear_shape(table, backends, "qkv", N, C, 3 * C, true);
  check_linear_shape(table, backends, "attn_proj", N, C, C, true);
  check_linear_shape(table, backends, "fc", N, C, 4 * C, true);
  check_linear_shape(table, backends, "fc_proj", N, 4 * C, C, true);
  check_linear_shape(table, backends, "lm_head", N, C, s.Vp, false);
  check_linear_columns(table, backends, N, C);
}

namespace {
void check_attention_with(Table& table, Backends& backends, const Shapes& s, double p,
                          int64_t element_offset = 0) {
  Scratch x(backends);
  const std::vector<uint64_t> keys = {0x1234, 0x5678, 0x9abc, 0xdef0, 0x1111, 0x2222, 0x3333, 0x4444};
  std::vector<uint64_t> batch_keys(s.B);
  for (int b = 0; b < s.B; ++b) batch_keys[b] = keys[b % keys.size()] + uint64_t(b);
  const DropoutMask mask{p, batch_keys.data(), element_offset};
  const DropoutMask* dropout = p > 0 ? &mask : nullptr;
  const std::string suffix =
      (p > 0 ? " dropout " + std::to_string(p).substr(0, 3) : "") + (element_offset != 0 ? " offset" : "");
  const Twin& qkv = x.random({s.B, s.T, 3 * s.C}, 31);
  const Twin& out = x.random({s.B, s.T, s.C}, 32);
  const Twin& att = x.raw({s.B, s.NH, s.T, s.T}, DType::kF32, {});
  const std::string shape = shape_string(qkv.cpu.shape);
  check_float_op(
      table, x,
      {"attention_forward" + suffix,
       shape,
       {&qkv},
       {{"out", &out}, {"att", &att}},
       {},
       [&](Ops& ops, bool g) { ops.attention_forward(out.on(g), att.on(g), qkv.on(g), dropout); }});
  // The backward from the CPU forward's probabilities.
  backends.cpu.attention_forward(out.cpu, att.cpu, qkv.cpu, dropout);
  const Twin& saved_att = x.values(att.cpu.shape, x.floats(att, false));
  const Twin& dout = x.random({s.B, s.T, s.C}, 33);
  const Twin& dqkv = x.random({s.B, s.T, 3 * s.C}, 34);
  check_float_op(table, x,
                 {"attention_backward" + suffix,
                  shape,
                  {&dout, &qkv},
                  {{"dqkv", &dqkv}},
                  {&saved_att},
                  [&](Ops& ops, bool g) {
                    ops.attention_backward(dqkv.on(g), dout.on(g), qkv.on(g), saved_att.on(g), dropout);
                  }});
}
}  // namespace

void check_attention(Table& table, Backends& backends, const Shapes& s) {
  check_attention_with(table, backends, s, 0.0);
  check_attention_with(table, backends, s, 0.1);
  // As a tensor-parallel rank holding heads NH.. of a model with twice the heads draws its masks.
  check_attention_with(table, backends, s, 0.1, int64_t(s.NH) * s.T * s.T);
  Scratch x(backends);
  const Twin& qkv = x.random({s.T, 3 * s.C}, 35);
  const Twin& out = x.random({1, s.C}, 36);
  const Twin& att = x.random({s.NH, s.T}, 37);
  check_float_op(table, x,
                 {"attention_decode",
                  shape_string(qkv.cpu.shape),
                  {&qkv},
                  {{"out", &out}, {"att", &att}},
                  {},
                  [&](Ops& ops, bool g) { ops.attention_decode(out.on(g), att.on(g), qkv.on(g)); }});
}

void check_gelu(Table& table, Backends& backends, const Shapes& s) {
  Scratch x(backends);
  const std::vector<int64_t> shape = {s.N(), 4 * int64_t(s.C)};
  const Twin& in = x.random(shape, 41, 2.0f);
  const Twin& out = x.random(shape, 42);
  check_float_op(table, x,
                 {"gelu_forward", shape_string(shape), {&in}, {{"out", &out}}, {}, [&](Ops& ops, bool g) {
                    ops.gelu_forward(out.on(g), in.on(g));
                  }});
  const Twin& dout = x.random(shape, 43);
  const Twin& dx = x.random(shape, 44);
  check_float_op(
      table, x,
      {"gelu_backward", shape_string(shape), {&in, &dout}, {{"dx", &dx}}, {}, [&](Ops& ops, bool g) {
         ops.gelu_backward(dx.on(g), in.on(g), dout.on(g));
       }});
}

namespace {
// The vocabulary-parallel cross-entropy on the second of two slices of the logits (columns [Vp/2, Vp), the
// padding among them): its stats; the merge over both slices' stats (the CPU's, gathered) into its losses
// and probabilities; the backward on its columns from the CPU's probabilities.
void check_cross_entropy_columns(Table& table, Scratch& x, const Shapes& s, const Twin& whole_logits,
                                 const Twin& targets, const Twin& dlosses) {
  Backends& backends = x.backends();
  const int64_t N = s.N(), W = s.Vp / 2, first = s.Vp - W;
  const std::vector<float> all = x.floats(whole_logits, false);
  std::vector<float> halves[2] = {std::vector<float>(N * W), std::vector<float>(N * W)};
  for (int64_t n = 0; n < N; ++n)
    for (int h = 0; h < 2; ++h)
      std::copy(all.begin() + n * s.Vp + h * W, all.begin() + n * s.Vp + (h + 1) * W,
                halves[h].begin() + n * W);
  const Twin& logits0 = x.values({N, W}, halves[0]);
  const Twin& logits = x.values({N, W}, halves[1]);
  const Twin& stats = x.random({N, 3}, 55);
  const std::string shape = shape_string(logits.cpu.shape) + " columns 2/2";
  check_float_op(
      table, x,
      {"cross_entropy_stats", shape, {&logits}, {{"stats", &stats}}, {&targets}, [&](Ops& ops, bool g) {
         ops.cross_entropy_stats(stats.on(g), logits.on(g), targets.on(g), first, s.V);
       }});
  const Twin& stats0 = x.random({N, 3}, 56);
  backends.cpu.cross_entropy_stats(stats0.cpu, logits0.cpu, targets.cpu, 0, s.V);
  backends.cpu.cross_entropy_stats(stats.cpu, logits.cpu, targets.cpu, first, s.V);
  std::vector<float> gathered = x.floats(stats0, false), second = x.floats(stats, false);
  gathered.insert(gathered.end(), second.begin(), second.end());
  const Twin& all_stats = x.values({2, N, 3}, gathered);
  const Twin& losses = x.random({N}, 57);
  const Twin& probs = x.random({N, W}, 58);
  check_float_op(table, x,
                 {"cross_entropy_merge",
                  shape,
                  {&logits},
                  {{"losses", &losses}, {"probs", &probs}},
                  {&all_stats},
                  [&](Ops& ops, bool g) {
                    ops.cross_entropy_merge(losses.on(g), probs.on(g), logits.on(g), all_stats.on(g), first,
                                            s.V);
                  },
                  false});  // the stats are the fp32 logits': rounding the logits alone would mix precisions
  backends.cpu.cross_entropy_merge(losses.cpu, probs.cpu, logits.cpu, all_stats.cpu, first, s.V);
  const Twin& saved_probs = x.values({N, W}, x.floats(probs, false));
  const Twin& dlogits = x.random({N, W}, 59);
  check_float_op(table, x,
                 {"cross_entropy_backward_columns",
                  shape,
                  {&saved_probs},
                  {{"dlogits", &dlogits}},
                  {&targets, &dlosses},
                  [&](Ops& ops, bool g) {
                    ops.cross_entropy_backward_columns(dlogits.on(g), saved_probs.on(g), targets.on(g),
                                                       dlosses.on(g), first, s.V);
                  }});
}
}  // namespace

void check_cross_entropy(Table& table, Backends& backends, const Shapes& s) {
  Scratch x(backends);
  const int64_t N = s.N();
  const Twin& logits = x.random({N, s.Vp}, 51, 3.0f);
  const Twin& targets = x.tokens({N}, s.V, 52);
  const Twin& losses = x.random({N}, 53);
  const Twin& probs = x.raw({N, s.Vp}, DType::kF32, {});
  const std::string shape = shape_string(logits.cpu.shape);
  check_float_op(table, x,
                 {"cross_entropy_forward",
                  shape,
                  {&logits},
                  {{"losses", &losses}, {"probs", &probs}},
                  {&targets},
                  [&](Ops& ops, bool g) {
                    ops.cross_entropy_forward(losses.on(g), probs.on(g), logits.on(g), targets.on(g), s.V);
                  }});
  backends.cpu.cross_entropy_forward(losses.cpu, probs.cpu, logits.cpu, targets.cpu, s.V);
  const Twin& saved_probs = x.values(probs.cpu.shape, x.floats(probs, false));
  const Twin& dlosses = x.values({N}, std::vector<float>(N, 1.0f / float(N)));
  const Twin& dlogits = x.random({N, s.Vp}, 54);
  check_float_op(table, x,
                 {"cross_entropy_backward",
                  shape,
                  {&saved_probs},
                  {{"dlogits", &dlogits}},
                  {&targets, &dlosses},
                  [&](Ops& ops, bool g) {
                    ops.cross_entropy_backward(dlogits.on(g), saved_probs.on(g), targets.on(g), dlosses.on(g),
                                               s.V);
                  }});
  check_cross_entropy_columns(table, x, s, logits, targets, dlosses);
}

}  // namespace gpt::gpu_check
