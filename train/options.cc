// Flags + DeepSpeed JSON -> TrainOptions; see options.h.
#include "train/options.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "train/ds_config.h"
#include "train/flags.h"

namespace gpt {
namespace {

std::string str(int64_t v) {
  return std::to_string(v);
}

// Batch sizes: any two of (micro, accumulation, global) determine the third; all three must agree.
void resolve_batch(std::optional<int64_t> micro, std::optional<int64_t> accumulation,
                   std::optional<int64_t> global, int world_size, TrainOptions* o) {
  const int64_t W = world_size;
  if (micro && accumulation && global && *micro * *accumulation * W != *global) {
    throw UsageError("global batch " + str(*global) + " != micro-batch " + str(*micro) +
                     " x accumulation steps " + str(*accumulation) + " x world size " + str(W) +
                     "; change --global-batch-size (train_batch_size) or the micro-batch size so they agree");
  }
  if (!micro) {
    if (global && accumulation) {
      if (*global % (*accumulation * W) != 0) {
        throw UsageError("global batch " + str(*global) + " is not divisible by accumulation steps " +
                         str(*accumulation) + " x world size " + str(W) + "; change --global-batch-size");
      }
      micro = *global / (*accumulation * W);
    } else {
      micro = 4;
    }
  }
  if (!accumulation) {
    if (global) {
      if (*global % (*micro * W) != 0) {
        throw UsageError("global batch " + str(*global) + " is not divisible by micro-batch " + str(*micro) +
                         " x world size " + str(W) +
                         "; choose --global-batch-size as a multiple of micro-batch x ranks");
      }
      accumulation = *global / (*micro * W);
    } else {
      accumulation = 1;
    }
  }
  o->micro_batch = int(*micro);
  o->accumulation_steps = int(*accumulation);
  o->global_batch = *micro * *accumulation * W;
}

}  // namespace

bool parse_train_options(int argc, const char* const* argv, int world_size, TrainOptions* out) {
  TrainOptions& o = *out;
  o.model.seq_len = 1024;
  o.zero.hidden_dropout = 0.1;  // Megatron's and GPT-2's default
  o.zero.attention_dropout = 0.1;
  int micro = 4, stage = 0;
  int64_t global = 0;
  double clip = 1.0, weight_decay = 0.01;
  bool fp16 = false, bf16 = false, checkpoint = false;

  FlagParser flags("gpt_train",
                   "Trains GPT-2 with ZeRO over MPI: mpiexec -n N gpt_train [flags] (see README.md).");
  flags.group("Model");
  flags.add_int("--num-layers", &o.model.num_layers, "transformer blocks", 1, 1 << 16);
  flags.add_int("--hidden-size", &o.model.hidden, "model width C", 1, 1 << 20);
  flags.add_int("--num-attention-heads", &o.model.heads, "attention heads (must divide the hidden size)", 1,
                1 << 16);
  flags.add_int("--seq-length", &o.model.seq_len, "tokens per training sequence", 1, 1 << 20);
  flags.add_int("--max-position-embeddings", &o.model.max_positions, "rows of the position table", 1,
                1 << 20);
  flags.add_int("--vocab-size", &o.model.vocab, "vocabulary (padded to a multiple of 128 inside)", 2, 65536);
  flags.add_double("--hidden-dropout", &o.zero.hidden_dropout, "dropout on embeddings and residual branches",
                   0.0, 0.99);
  flags.add_double("--attention-dropout", &o.zero.attention_dropout, "dropout on attention probabilities",
                   0.0, 0.99);
  flags.group("Batch and optimization");
  flags.add_int("--micro-batch-size", &micro, "sequences per rank per micro-step", 1, 1 << 20);
  flags.add_alias("--batch-size", "--micro-batch-size");
  flags.add_int64("--global-batch-size", &global, "sequences per optimizer step over all ranks", 1,
                  int64_t(1) << 40);
  flags.add_int("--train-iters", &o.train_iters, "optimizer steps", 1, 1 << 30);
  flags.add_double("--lr", &o.lr, "AdamW learning rate", 0.0, 10.0);
  flags.add_double("--weight-decay", &weight_decay, "AdamW decoupled weight decay (not on biases/LayerNorm)",
                   0.0, 10.0);
  flags.add_double("--clip-grad", &clip, "global gradient-norm clipping, 0 = off", 0.0, 1e9);
  flags.add_int64("--seed", &o.seed, "initialization, data order and dropout seed", 0, INT64_MAX);
  flags.group("Precision and memory");
  flags.add_switch("--fp16", &fp16, "fp16 compute weights and gradients, dynamic loss scaling");
  flags.add_switch("--bf16", &bf16, "bf16 compute weights and gradients");
  flags.add_switch("--checkpoint-activations", &checkpoint, "keep only block inputs; recompute in backward");
  flags.group("ZeRO and the cluster");
  flags.add_int("--zero-stage", &stage, "0 data parallel, 1 +optimizer states, 2 +gradients, 3 +weights",
                -1000, 1000);
  flags.add_string("--deepspeed_config", &o.deepspeed_config, "DeepSpeed JSON config file");
  flags.add_int("--ranks-per-node", &o.ranks_per_node,
                "simulate nodes of K consecutive ranks (0 = real nodes)", 0, 1 << 20);
  flags.group("Data, machine and output");
  flags.add_string("--data-path", &o.data_path, "a token shard, or a glob of shards ('data/train_*.bin')");
  flags.add_int("--threads", &o.threads, "CPU threads per rank (0 = all cores)", 0, 1024);
  flags.add_string("--metrics-file", &o.metrics_file, "JSON Lines, one object per optimizer step (rank 0)");
  if (!flags.parse(argc, argv)) return false;

  DeepSpeedConfig ds;
  if (!o.deepspeed_config.empty()) ds = read_deepspeed_config(o.deepspeed_config);
  for (const std::string& w : ds.warnings) o.notes.push_back(ds.path + ": " + w);
  const std::string json_name = o.deepspeed_config.empty() ? "" : o.deepspeed_config;
  // A flag on the command line wins over the JSON key; say so when both were given and differ.
  auto pick_int = [&](const char* flag, int64_t flag_value, const char* key,
                      std::optional<int64_t> json_value) -> std::optional<int64_t> {
    if (flags.given(flag)) {
      if (json_value && *json_value != flag_value) {
        o.notes.push_back(std::string(flag) + " " + str(flag_value) + " (command line) overrides " + key +
                          " " + str(*json_value) + " from " + json_name);
      }
      return flag_value;
    }
    return json_value;
  };

  const std::optional<int64_t> stage_value =
      pick_int("--zero-stage", stage, "zero_optimization.stage", ds.zero_stage);
  o.zero.stage = int(stage_value.value_or(0));
  if (o.zero.stage < 0 || o.zero.stage > 3) {
    throw UsageError("--zero-stage is " + str(o.zero.stage) + "; ZeRO stages are 0, 1, 2 and 3");
  }
  resolve_batch(pick_int("--micro-batch-size", micro, "train_micro_batch_size_per_gpu",
                         ds.train_micro_batch_size_per_gpu),
                ds.gradient_accumulation_steps,
                pick_int("--global-batch-size", global, "train_batch_size", ds.train_batch_size), world_size,
                &o);

  if (flags.given("--clip-grad")) {
    if (ds.gradient_clipping && *ds.gradient_clipping != clip) {
      o.notes.push_back("--clip-grad (command line) overrides gradient_clipping from " + json_name);
    }
    o.zero.gradient_clipping = clip;
  } else {
    o.zero.gradient_clipping = ds.gradient_clipping.value_or(clip);
  }
  const bool use_fp16 = fp16 || (!bf16 && ds.fp16_enabled.value_or(false));
  const bool use_bf16 = bf16 || (!fp16 && ds.bf16_enabled.value_or(false));
  if (use_fp16 && use_bf16) {
    throw UsageError(
        "both fp16 and bf16 are enabled; choose one (--fp16 or --bf16, or one \"enabled\": true)");
  }
  o.zero.precision = use_fp16 ? Precision::kFp16 : use_bf16 ? Precision::kBf16 : Precision::kFp32;
  LossScalerConfig& ls = o.zero.loss_scaler;
  ls.loss_scale = ds.loss_scale.value_or(ls.loss_scale);
  ls.initial_scale_power = int(ds.initial_scale_power.value_or(ls.initial_scale_power));
  ls.loss_scale_window = int(ds.loss_scale_window.value_or(ls.loss_scale_window));
  ls.hysteresis = int(ds.hysteresis.value_or(ls.hysteresis));
  ls.min_loss_scale = ds.min_loss_scale.value_or(ls.min_loss_scale);
  o.zero.reduce_bucket_size = ds.reduce_bucket_size.value_or(o.zero.reduce_bucket_size);
  // DeepSpeed turns overlap_comm on by default for stage 3 only.
  o.zero.overlap_comm = ds.overlap_comm.value_or(o.zero.stage == 3);
  o.zero.checkpoint_activations = checkpoint;
  o.zero.quantized_weights = ds.zero_quantized_weights.value_or(false);
  o.zero.hpz_partition_size = int(ds.zero_hpz_partition_size.value_or(1));
  o.zero.quantized_gradients = ds.zero_quantized_gradients.value_or(false);
  auto block = [](std::optional<int64_t> v, int fallback) {
    return v ? int(std::clamp<int64_t>(*v, -(int64_t(1) << 30), int64_t(1) << 30)) : fallback;
  };
  o.zero.weight_block = block(ds.zeropp_weight_block_size, o.zero.weight_block);
  o.zero.gradient_block = block(ds.zeropp_gradient_block_size, o.zero.gradient_block);
  o.zero.adam.beta1 = 0.9;
  o.zero.adam.beta2 = 0.999;
  o.zero.adam.eps = 1e-8;
  o.zero.adam.weight_decay = weight_decay;

  if (std::string problem = o.model.validate(); !problem.empty()) throw UsageError(problem);
  if (o.data_path.empty())
    throw UsageError("--data-path is required: give a token shard or a glob of shards");
  if (o.ranks_per_node > 0 && world_size % o.ranks_per_node != 0) {
    throw UsageError("--ranks-per-node " + str(o.ranks_per_node) + " does not divide the world size " +
                     str(world_size) + "; choose a divisor of the number of ranks");
  }
  return true;
}

}  // namespace gpt
