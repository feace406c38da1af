// The paper's activation-memory formulas and our restatement of them; see activation_formulas.h.
#include "train/activation_formulas.h"

#include <algorithm>

namespace gpt {

namespace {

// Ranks that share a tensor of this split: the whole group, or with kSequence only under sequence
// parallelism.
int64_t divisor(TermSplit split, const ActivationSetup& setup) {
  if (split == TermSplit::kSequence) return setup.sequence_parallel ? setup.t : 1;
  return setup.t;
}

// Per layer under a setup, from one side's bytes at t = 1.
double term_bytes(const LayerTerm& term, double bytes, const ActivationSetup& setup) {
  if (setup.recompute.is_full()) return term.block_input ? bytes / double(divisor(term.split, setup)) : 0;
  if (setup.recompute.is_selective() && term.split == TermSplit::kAttentionCore) return 0;
  return bytes / double(divisor(term.split, setup));
}

// Which positions of the residual stream the loop keeps and how many activation sets it allocates: the
// counts of model/loop.cc's plan_slots, in closed form (recompute.h defines the chunks).
struct SlotCounts {
  int64_t residual_slots = 0, sets = 0;
};

SlotCounts slot_counts(const Recompute& recompute, int64_t L) {
  if (!recompute.is_full()) return {L + 1, L};
  const int64_t n = std::min<int64_t>(recompute.num_layers, L);
  if (recompute.method == RecomputeMethod::kUniform) {
    // Each chunk's first input, the output, and n - 1 inner inputs of the chunk being recomputed; n sets.
    return {(L + n - 1) / n + 1 + (n - 1), n};
  }
  // Block n: every input kept; blocks 0..n-1 share one set, the others keep their own.
  return {L + 1, std::max<int64_t>(L - n + (n > 0 ? 1 : 0), 1)};
}

// The chunks full recomputation checkpoints (recompute.h): uniform, one per n layers; block, the first n.
int64_t chunk_count(const Recompute& recompute, int64_t L) {
  const int64_t n = std::min<int64_t>(recompute.num_layers, L);
  return recompute.method == RecomputeMethod::kUniform ? (L + n - 1) / n : n;
}

}  // namespace

ActivationShape activation_shape(const GPTConfig& config, int micro_batch) {
  return {config.seq_len, micro_batch, config.hidden, config.heads, config.num_layers, config.padded_vocab()};
}

std::vector<LayerTerm> layer_terms(const ActivationShape& x, AttentionResidual residual) {
  const double sbh = double(x.s) * x.b * x.h, as2b = double(x.a) * x.s * x.s * x.b, sb = double(x.s) * x.b;
  const bool lse = residual == AttentionResidual::kLogSumExp;
  using S = TermSplit;
  // {block, paper tensor, paper bytes, our tensor, our bytes, split, block input}
  return {
      {"attention", "QKV linear input (LayerNorm 1 output)", 2 * sbh, "ln1", 4 * sbh, S::kSequence, false},
      {"attention", "QK^T inputs (Q and K)", 4 * sbh, "qkv, its Q and K columns", 8 * sbh, S::kTensor, false},
      {"attention", "softmax output", 2 * as2b,
       lse ? "att (each row's log-sum-exp: the backward recomputes the probabilities)"
           : "att (probabilities before dropout)",
       lse ? 4.0 * x.a * x.s * x.b : 4 * as2b, S::kAttentionCore, false, lse},
      {"attention", "softmax dropout mask", as2b, "none: regenerated from its key", 0, S::kAttentionCore,
       false},
      {"attention", "softmax dropout output (input of attention over V)", 2 * as2b,
       "none: the backward drops att again with the regenerated mask", 0, S::kAttentionCore, false},
      {"attention", "V", 2 * sbh, "qkv, its V columns", 4 * sbh, S::kTensor, false},
      {"attention", "linear projection input", 2 * sbh, "atty", 4 * sbh, S::kTensor, false},
      {"attention", "attention dropout mask", sbh, "none: regenerated from its key", 0, S::kSequence, false},
      {"MLP", "first linear input (LayerNorm 2 output)", 2 * sbh, "ln2", 4 * sbh, S::kSequence, false},
      {"MLP", "GeLU input", 8 * sbh, "fch", 16 * sbh, S::kTensor, false},
      {"MLP", "second linear input (GeLU output)", 8 * sbh, "fch_gelu", 16 * sbh, S::kTensor, false},
      {"MLP", "MLP dropout mask", sbh, "none: regenerated from its key", 0, S::kSequence, false},
      {"LayerNorm", "LayerNorm 1 input (the layer input)", 2 * sbh,
       "block input x (the loop's residual slot)", 4 * sbh, S::kSequence, true},
      {"LayerNorm", "LayerNorm 2 input", 2 * sbh, "residual2", 4 * sbh, S::kSequence, false},
      {"LayerNorm", "none: the statistics are recomputed", 0, "ln1_mean, ln1_rstd, ln2_mean, ln2_rstd",
       16 * sb, S::kSequence, false, true},
  };
}

double paper_term_bytes(const LayerTerm& term, const ActivationSetup& setup) {
  return term_bytes(term, term.paper_bytes, setup);
}

double our_term_bytes(const LayerTerm& term, const ActivationSetup& setup) {
  return term_bytes(term, term.our_bytes, setup);
}

double paper_layer_bytes(const ActivationShape& x, const ActivationSetup& setup) {
  const double sbh = double(x.s) * x.b * x.h, t = setup.t, core = 5.0 * x.a * x.s / x.h;
  const bool sp = setup.sequence_parallel && setup.t > 1;
  if (setup.recompute.is_full()) return sp || setup.partitioned() ? 2 * sbh / t : 2 * sbh;
  const double attention_core = setup.recompute.is_selective() ? 0 : core;
  if (sp) return sbh / t * (34 + attention_core);
  return sbh * (10 + 24 / t + attention_core / t);
}

double paper_input_output_bytes(const ActivationShape& x, const ActivationSetup& setup) {
  const double sbh = double(x.s) * x.b * x.h, t = setup.t;
  const double replicated = setup.sequence_parallel && setup.t > 1 ? t : 1;
  const double embedding_mask = sbh / replicated;
  const double output = (2 * sbh + 2 * sbh) / replicated + 4.0 * x.s * x.b * x.v / t;
  return embedding_mask + output;
}

double paper_model_bytes(const ActivationShape& x, const ActivationSetup& setup) {
  return double(x.L) * paper_layer_bytes(x, setup) + paper_input_output_bytes(x, setup);
}

int64_t RestatedActivations::bytes_of(const std::string& group) const {
  int64_t total = 0;
  for (const RestatedLine& line : lines) total += line.group == group ? line.bytes() : 0;
  return total;
}

namespace {

// The layers' part: Section 4.1's terms as the loop keeps them, residual slots and activation sets.
void add_layer_lines(RestatedActivations& r, const ActivationShape& x, const ActivationSetup& setup, int E) {
  const SlotCounts slots = slot_counts(setup.recompute, x.L);
  r.residual_slots = slots.residual_slots;
  r.activation_sets = slots.sets;
  // Per-set terms at their per-rank size (the paper's split; full recomputation's sets hold every term).
  ActivationSetup kept = setup;
  kept.recompute = Recompute{};
  for (const LayerTerm& term : layer_terms(x, setup.attention_residual)) {
    if (term.our_bytes == 0) continue;
    const int64_t each =
        int64_t(our_term_bytes(term, kept) / 4) * (term.statistics ? statistics_bytes(E) : E);
    int64_t count = slots.sets;
    if (term.block_input) count = slots.residual_slots - 1;  // the last slot is the head's input
    if (term.block_input && setup.partitioned()) {
      // Each chunk's input as this rank's 1/t; the two in use take whole slots in turn.
      const int64_t chunks = chunk_count(setup.recompute, x.L);
      r.lines.push_back({"layers", "this rank's 1/t of each chunk input (partitioned checkpoints)",
                         term.paper_tensor, chunks, each / setup.t});
      count += 2 - chunks;
    }
    if (term.split == TermSplit::kAttentionCore && setup.recompute.is_selective()) count = 1;  // shared
    r.lines.push_back({"layers", term.our_tensor, term.paper_tensor, count, each});
  }
}

// Section 4.3's input and output layers as the head keeps them.
void add_input_output_lines(RestatedActivations& r, const ActivationShape& x, const ActivationSetup& setup,
                            int E) {
  const bool sp = setup.sequence_parallel && setup.t > 1;
  const int64_t t = setup.t, positions = sp ? x.s / t : x.s, row = x.b * positions * x.h;
  r.lines.push_back({"input/output", "none: regenerated from its key (x0 is block 0's input)",
                     "input embedding dropout mask", 0, 0});
  r.lines.push_back(
      {"input/output", "final output x_L (residual slot L)", "output LayerNorm input", 1, row * E});
  r.lines.push_back({"input/output", "lnf", "output projection input (LayerNorm output)", 1, row * E});
  if (sp)
    r.lines.push_back({"input/output", "lnf_full (lnf gathered over the sequence)",
                       "output projection input (LayerNorm output)", 1, x.b * x.s * x.h * E});
  r.lines.push_back({"input/output", "lnf_mean, lnf_rstd", "-", 2, x.b * positions * statistics_bytes(E)});
  if (setup.fused_classifier()) {
    r.lines.push_back({"input/output", "logits_chunk (the fused classifier's rows of logits)",
                       "cross-entropy logits (fp32)", 1, setup.classifier_rows * x.v * E});
  } else {
    r.lines.push_back({"input/output", "probs (logits, then probabilities)", "cross-entropy logits (fp32)", 1,
                       x.b * x.s * x.v / t * E});
  }
}

// Our working buffers, which the paper does not count: backward temporaries and collective buffers.
void add_working_lines(RestatedActivations& r, const ActivationShape& x, const ActivationSetup& setup,
                       int E) {
  const bool sp = setup.sequence_parallel && setup.t > 1;
  const int64_t t = setup.t, bs = x.b * x.s, row = x.b * (sp ? x.s / t : x.s) * x.h;
  auto add = [&](const std::string& tensor, int64_t count, int64_t elements, int bytes) {
    r.lines.push_back({"working", tensor, "-", count, elements * bytes});
  };
  const int S = statistics_bytes(E);
  add("losses, dlosses", 2, bs, S);
  if (t > 1) {
    add("stats (this rank's softmax statistics)", 1, 3 * bs, S);
    add("stats_all (the group's softmax statistics)", 1, 3 * t * bs, S);
  }
  add("dlnf", 1, row, E);
  add("scratch d_fch, d_fch_gelu", 2, bs * 4 * x.h / t, E);
  add("scratch d_qkv", 1, bs * 3 * x.h / t, E);
  add("scratch d_atty", 1, bs * x.h / t, E);
  add("scratch d_ln1, d_ln2", 2, row, E);
  add("dresidual", 1, row, E);
  if (setup.recompute.is_full()) add("recompute_out (a recomputed chunk's discarded output)", 1, row, E);
  if (sp) {
    add("gathered, partial (sequence parallelism's [b,s,h] buffers)", 2, bs * x.h, E);
    add("norm_grads (a LayerNorm's partial parameter gradients)", 1, 2 * x.h, S);
  }
}

}  // namespace

RestatedActivations restated_activations(const ActivationShape& shape, const ActivationSetup& setup,
                                         int element_bytes) {
  ActivationSetup s = setup;
  s.sequence_parallel = setup.sequence_parallel && setup.t > 1;
  RestatedActivations r;
  add_layer_lines(r, shape, s, element_bytes);
  add_input_output_lines(r, shape, s, element_bytes);
  add_working_lines(r, shape, s, element_bytes);
  for (const RestatedLine& line : r.lines) r.total_bytes += line.bytes();
  return r;
}

}  // namespace gpt
