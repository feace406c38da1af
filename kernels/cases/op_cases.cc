// The op cases of the layer ops, at any Sizes; see op_cases.h. Tolerances are for fp32 tensors against the
// fp64 reference, relative to the reference's largest magnitude: 1e-5 wherever a value is a sum of at most a
// few thousand rounded terms; the probabilities over a 50k vocabulary sum more.
#include "kernels/cases/op_cases.h"

#include <memory>
#include <stdexcept>

namespace gpt::cases {
namespace {

std::string shape_text(const std::vector<int64_t>& shape, const std::string& suffix = "") {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]" + suffix;
}

Arg in(std::string name, std::vector<int64_t> shape, double scale = 1) {
  return Arg{std::move(name), std::move(shape), scale, 0, true};
}
Arg out(std::string name, std::vector<int64_t> shape, double scale = 1) {
  return Arg{std::move(name), std::move(shape), scale, 0, false};
}
// A tensor the mixed-precision contract keeps in fp32 when the activations are fp16 or bf16.
Arg fp32(Arg a) {
  a.fp32 = true;
  return a;
}

Arg tokens(std::string name, std::vector<int64_t> shape, int below) {
  return Arg{std::move(name), std::move(shape), 0, below, false};
}

// Dropout's keys live as long as the case's run function: a DropoutMask points at them.
CaseRun with_keys(int count, double p, std::function<void(Ops&, const CaseTensors&, const DropoutMask*)> f) {
  auto keys = std::make_shared<std::vector<uint64_t>>();
  for (int b = 0; b < count; ++b) keys->push_back(0x9e3779b97f4a7c15ull * uint64_t(b + 1));
  return [keys, p, f](Ops& ops, const CaseTensors& t) {
    const DropoutMask mask{p, keys->data(), 0};
    f(ops, t, p > 0 ? &mask : nullptr);
  };
}

void add_embedding(std::vector<OpCase>& cases, const Sizes& s) {
  const int64_t B = s.B, T = s.T, C = s.C, Vp = s.Vp(), R = Vp / 2, first = Vp - R;
  const std::string shape = shape_text({B, T, C});
  const Arg ids = tokens("tokens", {B, T}, s.V);
  cases.push_back({"embedding",
                   "embedding_forward",
                   shape,
                   {ids, in("wte", {Vp, C}, 0.02), in("wpe", {T, C}, 0.01), out("out", {B, T, C})},
                   {"out"}});
  cases.back().run = [](Ops& o, const CaseTensors& t) {
    o.embedding_forward(t["out"], t["tokens"], t["wte"], t["wpe"]);
  };
  cases.push_back({"embedding",
                   "embedding_backward",
                   shape,
                   {ids, in("dout", {B, T, C}), fp32(out("dwte", {Vp, C})), fp32(out("dwpe", {T, C}))},
                   {"dwte", "dwpe"}});
  cases.back().run = [](Ops& o, const CaseTensors& t) {
    o.embedding_backward(t["dwte"], t["dwpe"], t["dout"], t["tokens"]);
  };
  // The vocabulary-parallel embedding on the second of two slices of the table.
  const std::string rows = shape_text({B, T, C}, " rows 2/2");
  cases.push_back({"embedding",
                   "embedding_forward_rows",
                   rows,
                   {ids, in("wte", {R, C}, 0.02), in("wpe", {T, C}, 0.01), out("out", {B, T, C})},
                   {"out"}});
  cases.back().run = [first](Ops& o, const CaseTensors& t) {
    o.embedding_forward_rows(t["out"], t["tokens"], t["wte"], first, t["wpe"]);
  };
  cases.push_back({"embedding",
                   "embedding_backward_rows",
                   rows,
                   {ids, in("dout", {B, T, C}), fp32(out("dwte", {R, C})), fp32(out("dwpe", {T, C}))},
                   {"dwte", "dwpe"}});
  cases.back().run = [first](Ops& o, const CaseTensors& t) {
    o.embedding_backward_rows(t["dwte"], first, t["dwpe"], t["dout"], t["tokens"]);
  };
}

std::vector<Arg> layernorm_args(const Sizes& s) {
  const int64_t N = s.N(), C = s.C;
  return {in("x", {N, C}, 2.0),  in("w", {C}, 0.5),         in("b", {C}, 0.1),
          out("out", {N, C}, 0), fp32(out("mean", {N}, 0)), fp32(out("rstd", {N}, 0))};
}
void layernorm_forward(Ops& o, const CaseTensors& t) {
  o.layernorm_forward(t["out"], t["mean"], t["rstd"], t["x"], t["w"], t["b"]);
}
void layernorm_backward(Ops& o, const CaseTensors& t) {
  o.layernorm_backward(t["dx"], t["dw"], t["db"], t["dout"], t["x"], t["w"], t["mean"], t["rstd"]);
}

void add_layernorm(std::vector<OpCase>& cases, const Sizes& s) {
  const int64_t N = s.N(), C = s.C;
  const std::string shape = shape_text({N, C});
  cases.push_back({"layernorm", "layernorm_forward", shape, layernorm_args(s), {"out", "mean", "rstd"}});
  cases.back().run = layernorm_forward;
  std::vector<Arg> args = layernorm_args(s);
  for (Arg a : {in("dout", {N, C}), out("dx", {N, C}), fp32(out("dw", {C})), fp32(out("db", {C}))})
    args.push_back(a);
  cases.push_back({"layernorm", "layernorm_backward", shape, args, {"dx", "dw", "db"}});
  cases.back().prepare = layernorm_forward;
  cases.back().run = layernorm_backward;
  // The residual stream's add with the LayerNorm that reads the sum: LayerNorm 2 of every block into its own
  // tensor, and in place (the sum written over b: the next block's LayerNorm 1 and the final one, whose
  // input holds the previous block's MLP output until then).
  cases.push_back({"layernorm",
                   "residual_layernorm_forward",
                   shape,
                   {in("a", {N, C}, 2.0), in("b", {N, C}), in("w", {C}, 0.5), in("bias", {C}, 0.1),
                    out("residual", {N, C}, 0), out("out", {N, C}, 0), fp32(out("mean", {N}, 0)),
                    fp32(out("rstd", {N}, 0))},
                   {"residual", "out", "mean", "rstd"}});
  cases.back().run = [](Ops& o, const CaseTensors& t) {
    o.residual_layernorm_forward(t["residual"], t["out"], t["mean"], t["rstd"], t["a"], t["b"], t["w"],
                                 t["bias"]);
  };
  cases.push_back({"layernorm",
                   "residual_layernorm_forward in place",
                   shape,
                   {in("a", {N, C}, 2.0), out("b", {N, C}), in("w", {C}, 0.5), in("bias", {C}, 0.1),
                    out("out", {N, C}, 0), fp32(out("mean", {N}, 0)), fp32(out("rstd", {N}, 0))},
                   {"b", "out", "mean", "rstd"}});
  cases.back().run = [](Ops& o, const CaseTensors& t) {
    o.residual_layernorm_forward(t["b"], t["out"], t["mean"], t["rstd"], t["a"], t["b"], t["w"], t["bias"]);
  };
}

// One of the model's linear layers: forward, and backward accumulating into random gradients.
void add_linear_layer(std::vector<OpCase>& cases, const std::string& layer, int64_t N, int64_t IC, int64_t OC,
                      bool bias) {
  const std::string shape = shape_text({N, IC}, "x" + std::to_string(OC));
  std::vector<Arg> args = {in("x", {N, IC}), in("w", {OC, IC}), out("out", {N, OC})};
  if (bias) args.push_back(in("b", {OC}, 0.02));
  args[1].scale = 0.02;
  cases.push_back({"linear", "linear_forward " + layer, shape, args, {"out"}});
  cases.back().flops = 2.0 * N * IC * OC;
  cases.back().run = [bias](Ops& o, const CaseTensors& t) {
    o.linear_forward(t["out"], t["x"], t["w"], bias ? t["b"] : Tensor{});
  };
  for (Arg a : {in("dout", {N, OC}, 0.1), out("dx", {N, IC}), fp32(out("dw", {OC, IC}))}) args.push_back(a);
  std::vector<std::string> outputs = {"dx", "dw"};
  if (bias) {
    args.push_back(fp32(out("db", {OC})));
    outputs.push_back("db");
  }
  cases.push_back({"linear", "linear_backward " + layer, shape, args, outputs});
  cases.back().flops = 4.0 * N * IC * OC;
  cases.back().run = [bias](Ops& o, const CaseTensors& t) {
    o.linear_backward(t["dx"], t["dw"], bias ? t["db"] : Tensor{}, t["dout"], t["x"], t["w"]);
  };
}

// Memory-centric tiling's ops: the second of two tiles of fc, writing and reading the tile's columns of the
// whole layer's [N, 4C] tensors.
void add_linear_columns(std::vector<OpCase>& cases, const Sizes& s) {
  const int64_t N = s.N(), C = s.C, OC = 4 * C, W = OC / 2, first = OC - W;
  const std::string shape = shape_text({N, C}, "x" + std::to_string(OC) + " tile 2/2");
  std::vector<Arg> args = {in("x", {N, C}), in("w", {W, C}, 0.02), in("b", {W}, 0.02), out("out", {N, OC})};
  cases.push_back({"linear", "linear_forward_columns fc", shape, args, {"out"}});
  cases.back().run = [first](Ops& o, const CaseTensors& t) {
    o.linear_forward_columns(t["out"], first, t["x"], t["w"], t["b"]);
  };
  for (Arg a : {in("dout", {N, OC}, 0.1), out("dx", {N, C}), fp32(out("dw", {W, C})), fp32(out("db", {W}))})
    args.push_back(a);
  cases.push_back({"linear", "linear_backward_columns fc", shape, args, {"dx", "dw", "db"}});
  cases.back().run = [first](Ops& o, const CaseTensors& t) {
    o.linear_backward_columns(t["dx"], t["dw"], t["db"], t["dout"], first, t["x"], t["w"]);
  };
}

void add_linear(std::vector<OpCase>& cases, const Sizes& s) {
  const int64_t N = s.N(), C = s.C;
  add_linear_layer(cases, "qkv", N, C, 3 * C, true);
  add_linear_layer(cases, "attn_proj", N, C, C, true);
  add_linear_layer(cases, "fc", N, C, 4 * C, true);
  add_linear_layer(cases, "fc_proj", N, 4 * C, C, true);
  add_linear_layer(cases, "lm_head", N, C, s.Vp(), false);
  add_linear_columns(cases, s);
}

// att is attention's residual: [B, NH, T, T] probabilities, or [B, NH, T] log-sum-exp on a backend that keeps
// that (Arg::attention_residual, Ops::attention_residual); out is what a flash backward reads.
std::vector<Arg> attention_args(const Sizes& s) {
  const int64_t B = s.B, T = s.T, C = s.C, NH = s.NH;
  Arg att = out("att", {B, NH, T, T}, 0);
  att.attention_residual = true;
  return {in("qkv", {B, T, 3 * C}), out("out", {B, T, C}, 0), att};
}

void add_attention(std::vector<OpCase>& cases, const Sizes& s) {
  const int64_t B = s.B, T = s.T, C = s.C;
  for (double p : {0.0, 0.1}) {
    const std::string suffix = p > 0 ? " dropout 0.1" : "";
    const std::string shape = shape_text({B, T, 3 * C});
    cases.push_back({"attention", "attention_forward" + suffix, shape, attention_args(s), {"out", "att"}});
    cases.back().run = with_keys(s.B, p, [](Ops& o, const CaseTensors& t, const DropoutMask* mask) {
      o.attention_forward(t["out"], t["att"], t["qkv"], mask);
    });
    std::vector<Arg> args = attention_args(s);
    args.push_back(in("dout", {B, T, C}));
    args.push_back(out("dqkv", {B, T, 3 * C}));
    cases.push_back({"attention", "attention_backward" + suffix, shape, args, {"dqkv"}});
    cases.back().prepare = with_keys(s.B, p, [](Ops& o, const CaseTensors& t, const DropoutMask* mask) {
      o.attention_forward(t["out"], t["att"], t["qkv"], mask);
    });
    cases.back().run = with_keys(s.B, p, [](Ops& o, const CaseTensors& t, const DropoutMask* mask) {
      o.attention_backward(t["dqkv"], t["dout"], t["qkv"], t["out"], t["att"], mask);
    });
  }
  cases.push_back({"attention",
                   "attention_decode",
                   shape_text({T, 3 * C}),
                   {in("qkv", {T, 3 * C}), out("out", {1, C}), out("att", {s.NH, T})},
                   {"out", "att"}});
  cases.back().run = [](Ops& o, const CaseTensors& t) { o.attention_decode(t["out"], t["att"], t["qkv"]); };
}

void add_gelu(std::vector<OpCase>& cases, const Sizes& s) {
  const std::vector<int64_t> shape = {s.N(), 4 * int64_t(s.C)};
  cases.push_back(
      {"gelu", "gelu_forward", shape_text(shape), {in("x", shape, 2.0), out("out", shape)}, {"out"}});
  cases.back().run = [](Ops& o, const CaseTensors& t) { o.gelu_forward(t["out"], t["x"]); };
  // The MLP's first layer with GELU applied in the GEMM (the CUDA backend's epilogue).
  const int64_t N = s.N(), C = s.C;
  const std::vector<int64_t> fc = {N, 4 * C};
  cases.push_back(
      {"gelu",
       "linear_gelu_forward fc",
       shape_text({N, C}, "x" + std::to_string(4 * C)),
       {in("x", {N, C}), in("w", {4 * C, C}, 0.02), in("b", {4 * C}, 0.02), out("pre", fc), out("out", fc)},
       {"pre", "out"}});
  cases.back().flops = 2.0 * N * C * 4 * C;
  cases.back().run = [](Ops& o, const CaseTensors& t) {
    o.linear_gelu_forward(t["out"], t["pre"], t["x"], t["w"], t["b"]);
  };
  cases.push_back({"gelu",
                   "gelu_backward",
                   shape_text(shape),
                   {in("x", shape, 2.0), in("dout", shape), out("dx", shape)},
                   {"dx"}});
  cases.back().run = [](Ops& o, const CaseTensors& t) { o.gelu_backward(t["dx"], t["x"], t["dout"]); };
}

std::vector<Arg> cross_entropy_args(const Sizes& s, int64_t columns) {
  const int64_t N = s.N();
  return {in("logits", {N, columns}, 3.0), tokens("targets", {N}, s.V), fp32(out("losses", {N}, 0)),
          out("probs", {N, columns}, 0)};
}

// The vocabulary-parallel cross-entropy as the rank holding the second half of the columns runs it, the
// first half's stats computed beside it (the all-gather's other part).
void add_cross_entropy_columns(std::vector<OpCase>& cases, const Sizes& s) {
  const int64_t N = s.N(), W = s.Vp() / 2, first = s.Vp() - W;
  const int V = s.V;
  const std::string shape = shape_text({N, W}, " columns 2/2");
  std::vector<Arg> args = cross_entropy_args(s, W);
  args.push_back(fp32(out("stats", {N, 3}, 0)));
  cases.push_back({"cross_entropy", "cross_entropy_stats", shape, args, {"stats"}});
  cases.back().run = [first, V](Ops& o, const CaseTensors& t) {
    o.cross_entropy_stats(t["stats"], t["logits"], t["targets"], first, V);
  };
  args = cross_entropy_args(s, W);
  for (Arg a : {in("logits0", {N, W}, 3.0), fp32(out("stats", {2, N, 3}, 0)), fp32(in("dlosses", {N})),
                out("dlogits", {N, W}, 0)})
    args.push_back(a);
  // The two ranks' stats, [2, N, 3], as the all-gather leaves them.
  auto gather_stats = [first, V](Ops& o, const CaseTensors& t) {
    const Tensor& stats = t["stats"];
    const size_t half = size_t(stats.nbytes() / 2);
    const Tensor of0{stats.data, {t["losses"].shape[0], 3}, stats.dtype, stats.device};
    const Tensor of1{static_cast<char*>(stats.data) + half, of0.shape, stats.dtype, stats.device};
    o.cross_entropy_stats(of0, t["logits0"], t["targets"], 0, V);
    o.cross_entropy_stats(of1, t["logits"], t["targets"], first, V);
  };
  auto merge_stats = [first, V](Ops& o, const CaseTensors& t) {
    o.cross_entropy_merge(t["losses"], t["probs"], t["logits"], t["stats"], first, V);
  };
  cases.push_back({"cross_entropy", "cross_entropy_merge", shape, args, {"losses", "probs"}});
  cases.back().prepare = gather_stats;
  cases.back().run = merge_stats;
  cases.push_back({"cross_entropy", "cross_entropy_backward_columns", shape, args, {"dlogits"}});
  cases.back().prepare = [gather_stats, merge_stats](Ops& o, const CaseTensors& t) {
    gather_stats(o, t);
    merge_stats(o, t);
  };
  cases.back().run = [first, V](Ops& o, const CaseTensors& t) {
    o.cross_entropy_backward_columns(t["dlogits"], t["probs"], t["targets"], t["dlosses"], first, V);
  };
}

void add_cross_entropy(std::vector<OpCase>& cases, const Sizes& s) {
  const int64_t N = s.N(), Vp = s.Vp();
  const int V = s.V;
  const std::string shape = shape_text({N, Vp});
  cases.push_back(
      {"cross_entropy", "cross_entropy_forward", shape, cross_entropy_args(s, Vp), {"losses", "probs"}});
  cases.back().run = [V](Ops& o, const CaseTensors& t) {
    o.cross_entropy_forward(t["losses"], t["probs"], t["logits"], t["targets"], V);
  };
  std::vector<Arg> args = cross_entropy_args(s, Vp);
  args.push_back(fp32(in("dlosses", {N})));
  args.push_back(out("dlogits", {N, Vp}, 0));
  cases.push_back({"cross_entropy", "cross_entropy_backward", shape, args, {"dlogits"}});
  cases.back().prepare = [V](Ops& o, const CaseTensors& t) {
    o.cross_entropy_forward(t["losses"], t["probs"], t["logits"], t["targets"], V);
  };
  cases.back().run = [V](Ops& o, const CaseTensors& t) {
    o.cross_entropy_backward(t["dlogits"], t["probs"], t["targets"], t["dlosses"], V);
  };
  add_cross_entropy_columns(cases, s);
}

// The fused classifier (Ops::classifier_forward / _backward) at the LM head's shape, in chunks of about a
// third of the rows, so the last chunk is shorter; the reference is the CPU's chunked composition of the
// unfused ops in fp64, the backward's dlosses not all equal.
void add_classifier(std::vector<OpCase>& cases, const Sizes& s) {
  const int64_t N = s.N(), C = s.C, Vp = s.Vp(), R = (N + 2) / 3;
  const int V = s.V;
  const std::string shape = shape_text({N, C}, "x" + std::to_string(Vp) + " chunks of " + std::to_string(R));
  std::vector<Arg> args = {in("lnf", {N, C}), in("wte", {Vp, C}, 0.02), tokens("targets", {N}, V),
                           fp32(out("losses", {N}, 0)), out("scratch", {R, Vp}, 0)};
  cases.push_back({"classifier", "classifier_forward", shape, args, {"losses"}});
  cases.back().flops = 2.0 * N * C * Vp;
  cases.back().run = [V](Ops& o, const CaseTensors& t) {
    o.classifier_forward(t["losses"], t["lnf"], t["wte"], t["targets"], V, t["scratch"]);
  };
  for (Arg a : {fp32(in("dlosses", {N})), out("dlnf", {N, C}), fp32(out("dwte", {Vp, C}))}) args.push_back(a);
  cases.push_back({"classifier", "classifier_backward", shape, args, {"dlnf", "dwte", "losses"}});
  cases.back().flops = 6.0 * N * C * Vp;  // the recomputed logits and the two backward GEMMs
  cases.back().run = [V](Ops& o, const CaseTensors& t) {
    o.classifier_backward(t["dlnf"], t["dwte"], t["losses"], t["lnf"], t["wte"], t["targets"], t["dlosses"],
                          V, t["scratch"]);
  };
}

// The residual stream's add, and AdamW over one transformer layer's parameters (the CPU has AdamW in fp32
// only, so its reference is the CPU's fp32 update; nvcc contracts the update's multiply-adds, hence 1e-5).
void add_residual_and_adamw(std::vector<OpCase>& cases, const Sizes& s) {
  const std::vector<int64_t> shape = {s.N(), s.C};
  cases.push_back(
      {"residual", "add", shape_text(shape), {in("a", shape), in("b", shape), out("out", shape)}, {"out"}});
  cases.back().run = [](Ops& o, const CaseTensors& t) { o.add(t["out"], t["a"], t["b"]); };
  const int64_t n = 12 * int64_t(s.C) * s.C + 13 * s.C;
  Arg v = out("v", {n}, 1e-4);
  v.squared = true;
  cases.push_back({"adamw",
                   "adamw step 7",
                   shape_text({n}),
                   {out("param", {n}, 0.02), in("grad", {n}, 1e-3), out("m", {n}, 1e-4), v},
                   {"param", "m", "v"}});
  cases.back().run = [](Ops& o, const CaseTensors& t) {
    o.adamw(t["param"], t["grad"], t["m"], t["v"], AdamWHyper{6e-4, 0.9, 0.95, 1e-8, 0.1, true}, 7, 0.5f);
  };
  cases.back().reference = DType::kF32;
  // The engine's update with its compute copy: the state fp32 in every row, the copy in the row's dtype
  // (CUDA's fused kernel in fp16 and bf16), compared with the updated fp32 parameters.
  cases.push_back({"adamw",
                   "adamw_with_copy step 7",
                   shape_text({n}),
                   {fp32(out("param", {n}, 0.02)), fp32(in("grad", {n}, 1e-3)), fp32(out("m", {n}, 1e-4)),
                    fp32(v), out("compute", {n}, 0)},
                   {"param", "m", "v", "compute"}});
  cases.back().run = [](Ops& o, const CaseTensors& t) {
    o.adamw_with_copy(t["param"], t["grad"], t["m"], t["v"], AdamWHyper{6e-4, 0.9, 0.95, 1e-8, 0.1, true}, 7,
                      0.5f, t["compute"]);
  };
  cases.back().reference = DType::kF32;
}

// The embedding, LayerNorm and the qkv layer, forward and backward.
void add_gradient_cases_of_layers(std::vector<GradientCase>& cases, const Sizes& s) {
  const int64_t B = s.B, T = s.T, C = s.C, N = s.N(), Vp = s.Vp();
  cases.push_back({"embedding",
                   "embedding",
                   shape_text({B, T, C}),
                   {tokens("tokens", {B, T}, s.V), in("wte", {Vp, C}), in("wpe", {T, C}),
                    out("out", {B, T, C}), out("dout", {B, T, C}), out("dwte", {Vp, C}), out("dwpe", {T, C})},
                   "out",
                   "dout",
                   {{"wte", "dwte"}, {"wpe", "dwpe"}}});
  cases.back().forward = [](Ops& o, const CaseTensors& t) {
    o.embedding_forward(t["out"], t["tokens"], t["wte"], t["wpe"]);
  };
  cases.back().backward = [](Ops& o, const CaseTensors& t) {
    o.embedding_backward(t["dwte"], t["dwpe"], t["dout"], t["tokens"]);
  };
  std::vector<Arg> ln = layernorm_args(s);
  for (Arg a : {out("dout", {N, C}), out("dx", {N, C}), out("dw", {C}), out("db", {C})}) ln.push_back(a);
  cases.push_back({"layernorm",
                   "layernorm",
                   shape_text({N, C}),
                   ln,
                   "out",
                   "dout",
                   {{"x", "dx"}, {"w", "dw"}, {"b", "db"}},
                   layernorm_forward,
                   layernorm_backward});
  cases.push_back({"linear",
                   "linear",
                   shape_text({N, C}, "x" + std::to_string(3 * C)),
                   {in("x", {N, C}), in("w", {3 * C, C}), in("b", {3 * C}), out("out", {N, 3 * C}),
                    out("dout", {N, 3 * C}), out("dx", {N, C}, 0), out("dw", {3 * C, C}), out("db", {3 * C})},
                   "out",
                   "dout",
                   {{"x", "dx"}, {"w", "dw"}, {"b", "db"}}});
  cases.back().forward = [](Ops& o, const CaseTensors& t) {
    o.linear_forward(t["out"], t["x"], t["w"], t["b"]);
  };
  cases.back().backward = [](Ops& o, const CaseTensors& t) {
    o.linear_backward(t["dx"], t["dw"], t["db"], t["dout"], t["x"], t["w"]);
  };
}

// Attention, GELU and the loss, forward and backward.
void add_gradient_cases_of_attention_and_loss(std::vector<GradientCase>& cases, const Sizes& s) {
  const int64_t B = s.B, T = s.T, C = s.C, N = s.N(), Vp = s.Vp();
  const int V = s.V;
  std::vector<Arg> att = attention_args(s);
  for (Arg a : {out("dout", {B, T, C}), out("dqkv", {B, T, 3 * C}, 0)}) att.push_back(a);
  cases.push_back(
      {"attention", "attention", shape_text({B, T, 3 * C}), att, "out", "dout", {{"qkv", "dqkv"}}});
  cases.back().forward = [](Ops& o, const CaseTensors& t) {
    o.attention_forward(t["out"], t["att"], t["qkv"], nullptr);
  };
  cases.back().backward = [](Ops& o, const CaseTensors& t) {
    o.attention_backward(t["dqkv"], t["dout"], t["qkv"], t["out"], t["att"], nullptr);
  };
  const std::vector<int64_t> wide = {N, 4 * C};
  cases.push_back({"gelu",
                   "gelu",
                   shape_text(wide),
                   {in("x", wide, 2.0), out("out", wide), out("dout", wide), out("dx", wide, 0)},
                   "out",
                   "dout",
                   {{"x", "dx"}}});
  cases.back().forward = [](Ops& o, const CaseTensors& t) { o.gelu_forward(t["out"], t["x"]); };
  cases.back().backward = [](Ops& o, const CaseTensors& t) { o.gelu_backward(t["dx"], t["x"], t["dout"]); };
  std::vector<Arg> ce = cross_entropy_args(s, Vp);
  for (Arg a : {out("dlosses", {N}), out("dlogits", {N, Vp}, 0)}) ce.push_back(a);
  cases.push_back({"cross_entropy",
                   "cross_entropy",
                   shape_text({N, Vp}),
                   ce,
                   "losses",
                   "dlosses",
                   {{"logits", "dlogits"}}});
  cases.back().forward = [V](Ops& o, const CaseTensors& t) {
    o.cross_entropy_forward(t["losses"], t["probs"], t["logits"], t["targets"], V);
  };
  cases.back().backward = [V](Ops& o, const CaseTensors& t) {
    o.cross_entropy_backward(t["dlogits"], t["probs"], t["targets"], t["dlosses"], V);
  };
}

template <typename Case>
void offset_by(Case& c, int offset) {
  c.offset = offset;
  if (offset) c.shape += " offset " + std::to_string(offset);
}

}  // namespace

std::string Sizes::describe() const {
  return "B=" + std::to_string(B) + " T=" + std::to_string(T) + " C=" + std::to_string(C) +
         " NH=" + std::to_string(NH) + " V=" + std::to_string(V) +
         (offset ? " offset " + std::to_string(offset) : "");
}

Sizes gpt2_124m() {
  return Sizes{4, 1024, 768, 12, 50257};
}

std::vector<std::pair<Sizes, std::string>> edge_sizes() {
  return {
      {Sizes{2, 1000, 768, 12, 1001}, "T = 1000: a partial last attention tile"},
      {Sizes{3, 1, 768, 12, 1001}, "T = 1: one row"},
      {Sizes{2, 512, 768, 6, 1001}, "head size 128 (the large shared-memory tiles)"},
      {Sizes{130, 64, 128, 2, 1001}, "130 sequences: two dropout-key chunks of attention"},
      {Sizes{3, 333, 102, 6, 1001}, "odd sizes: rows of 102 floats, head size 17, T = 333, V = 1001"},
      {Sizes{2, 64, 128, 2, 1001, 1}, "every float tensor 4 bytes past a 16-byte boundary"},
      {Sizes{64, 512, 128, 2, 1001}, "32768 rows: every chunked reduction's largest grid"},
  };
}

const Tensor& CaseTensors::operator[](const std::string& name) const {
  const auto it = by_name.find(name);
  if (it == by_name.end()) throw std::logic_error("op case: no tensor named " + name);
  return it->second;
}

std::vector<OpCase> op_cases(const Sizes& s) {
  std::vector<OpCase> cases;
  add_embedding(cases, s);
  add_layernorm(cases, s);
  add_linear(cases, s);
  add_attention(cases, s);
  add_gelu(cases, s);
  add_cross_entropy(cases, s);
  add_classifier(cases, s);
  add_residual_and_adamw(cases, s);
  for (OpCase& c : cases) offset_by(c, s.offset);
  return cases;
}

std::vector<GradientCase> gradient_cases(const Sizes& s) {
  std::vector<GradientCase> cases;
  add_gradient_cases_of_layers(cases, s);
  add_gradient_cases_of_attention_and_loss(cases, s);
  for (GradientCase& g : cases) offset_by(g, s.offset);
  return cases;
}

std::vector<std::string> families() {
  return {"embedding",     "layernorm",  "linear",   "attention", "gelu",
          "cross_entropy", "classifier", "residual", "adamw"};
}

}  // namespace gpt::cases
