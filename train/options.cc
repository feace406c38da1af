// Flags + DeepSpeed JSON -> TrainOptions; see options.h. Flags are Megatron's names (the ZeRO++ tutorial's
// command line is accepted as is); a flag given on the command line wins over the JSON key.
#include "train/options.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <sstream>
#include <tuple>
#include <vector>

#include "model/params.h"
#include "train/ds_config.h"
#include "train/model_flags.h"
#include "train/peak_flops.h"
#include "train/units.h"
#include "zero/engine.h"
#include "zero/pipeline_schedule.h"

namespace gpt {
namespace {

std::string str(int64_t v) {
  return std::to_string(v);
}

// Batch sizes: any two of (micro, accumulation, global) determine the third; all three must agree.
void resolve_batch(std::optional<int64_t> micro, std::optional<int64_t> accumulation,
                   std::optional<int64_t> global, int world_size, TrainOptions* o) {
  const int64_t W = world_size;  // the data-parallel ranks: the world at t = 1
  const std::string ranks = o->tensor_parallel > 1 ? " x data-parallel size " : " x world size ";
  if (micro && accumulation && global && *micro * *accumulation * W != *global) {
    throw UsageError("global batch " + str(*global) + " != micro-batch " + str(*micro) +
                     " x accumulation steps " + str(*accumulation) + ranks + str(W) +
                     "; change --global-batch-size (train_batch_size) or the micro-batch size so they agree");
  }
  if (!micro) {
    if (global && accumulation) {
      if (*global % (*accumulation * W) != 0) {
        throw UsageError("global batch " + str(*global) + " is not divisible by accumulation steps " +
                         str(*accumulation) + ranks + str(W) + "; change --global-batch-size");
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
                         ranks + str(W) +
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

using Values = TrainFlags::Values;

// A setting accepted without effect: reported at start-up as "<key> accepted without effect<when>: <reason>",
// followed by the JSON file for a JSON key (a flag starts with "--").
struct WithoutEffect {
  bool applies = false;  // the setting is given and changes nothing in this run
  std::string key;       // the flag or JSON key, with its value where only that value is inert
  std::string reason;    // why it changes nothing here, and how to make it count where it can
  std::string when;      // "" or the circumstance that makes it inert (" on the CPU backend")
};

// Every setting DeepSpeed or Megatron accepts that does not change what this engine does, with its reason:
// the one table (docs/config.md, "Accepted without effect"). Asked once everything is resolved.
std::vector<WithoutEffect> without_effect_table(const DeepSpeedConfig& ds, const Values& v,
                                                const TrainOptions& o) {
  const ZeroConfig& z = o.zero;
  const std::string zo = "zero_optimization.", a = "activation_checkpointing.";
  const bool cuda = o.device == "cuda", full = z.recompute.is_full();
  // partition_activations that neither --distribute-saved-activations nor the key itself turned on.
  const bool unpartitioned = ds.partition_activations.value_or(false) && !z.distribute_saved_activations;
  const bool cpu_checkpointing = ds.cpu_checkpointing.value_or(false);
  return {
      {v.flash_attention, "--use-flash-attn",
       "attention always runs our own kernel (on the GPU a tiled one with fp32 softmax statistics, which "
       "still stores the probabilities the backward reads)"},
      {ds.reduce_scatter && !*ds.reduce_scatter && z.stage >= 2, zo + "reduce_scatter false",
       "stages 2 and 3 always reduce-scatter gradients"},
      {bool(ds.contiguous_gradients), zo + "contiguous_gradients",
       "gradients are always packed into contiguous bucket buffers"},
      {bool(ds.stage3_prefetch_bucket_size), zo + "stage3_prefetch_bucket_size",
       "with overlap_comm the engine prefetches exactly one unit ahead"},
      {ds.stage3_param_persistence_threshold && *ds.stage3_param_persistence_threshold > 0,
       zo + "stage3_param_persistence_threshold",
       "every unit is partitioned (threshold 0), which keeps the byte closed forms exact"},
      {bool(ds.stage3_max_live_parameters), zo + "stage3_max_live_parameters",
       "at most two units are gathered at once"},
      {unpartitioned && o.tensor_parallel == 1, a + "partition_activations", "its group is one rank",
       " at --tensor-model-parallel-size 1"},
      {unpartitioned && o.tensor_parallel > 1 && !full, a + "partition_activations",
       "it partitions full recomputation's checkpoints; add --recompute-granularity full to use it"},
      {cpu_checkpointing && !cuda, a + "cpu_checkpointing", "activations are already in host memory",
       " on the CPU backend"},
      {cpu_checkpointing && cuda && !z.recompute.checkpoints_on_host, a + "cpu_checkpointing",
       "it moves full recomputation's checkpoints (without --sequence-parallel) to host memory; add "
       "--recompute-granularity full to use it"},
      {ds.contiguous_memory_optimization.value_or(false) || ds.number_checkpoints,
       a + "contiguous_memory_optimization/number_checkpoints",
       "the layer loop allocates its activation and checkpoint buffers once, at start-up, and reuses them "
       "every step, so checkpointing never fragments memory"},
      {ds.synchronize_checkpoint_boundary.value_or(false), a + "synchronize_checkpoint_boundary",
       cuda ? "no device synchronization is added at checkpoint boundaries"
            : "the CPU backend computes synchronously"},
      {ds.checkpointing_profile.value_or(false), a + "profile",
       "no per-checkpoint timing is collected; wall_clock_breakdown times the step's phases"},
      {z.offload.aio.use_gds, "aio.use_gds", "no GPUDirect Storage here"},
      {ds.offload_optimizer_ratio && z.offload.ratio != 1.0, "offload_optimizer.ratio",
       "the whole optimizer step runs where its state is"},
      {bool(ds.offload_optimizer_fast_init), "offload_optimizer.fast_init",
       "the swap files are written once at start-up either way"},
      {bool(ds.offload_param_max_in_cpu), "offload_param.max_in_cpu",
       "with device \"nvme\" every compute weight shard lives in the swap file"},
  };
}

void note_without_effect(const DeepSpeedConfig& ds, const Values& v, TrainOptions& o) {
  for (const WithoutEffect& row : without_effect_table(ds, v, o)) {
    if (!row.applies) continue;
    const std::string from = row.key.starts_with("--") ? "" : " (" + ds.path + ")";
    o.notes.push_back(row.key + " accepted without effect" + row.when + ": " + row.reason + from);
  }
}

// --split "969,30,1": the fractions of --data-path's windows used for training and for validation.
std::pair<double, double> split_fractions(const std::string& split) {
  std::vector<double> w;
  std::stringstream in(split);
  for (std::string part; std::getline(in, part, ',');) {
    try {
      size_t used = 0;
      const double v = std::stod(part, &used);
      if (used != part.size() || v < 0) throw std::invalid_argument("");
      w.push_back(v);
    } catch (const std::exception&) {
      throw UsageError("--split '" + split + "' must be comma-separated weights such as 969,30,1");
    }
  }
  while (w.size() < 3) w.push_back(0);
  const double total = w[0] + w[1] + w[2];
  if (w.size() > 3 || total <= 0 || w[0] <= 0) {
    throw UsageError("--split '" + split +
                     "' must be three weights with a positive training share, e.g. 969,30,1");
  }
  return {w[0] / total, w[1] / total};
}

void add_model_group(FlagParser& flags, TrainOptions& o, Values& v) {
  flags.group("Model");
  add_model_flags(flags, &o.model);
  flags.add_double("--hidden-dropout", &o.zero.hidden_dropout, "dropout on embeddings and residual branches",
                   0.0, 0.99);
  flags.add_double("--attention-dropout", &o.zero.attention_dropout, "dropout on attention probabilities",
                   0.0, 0.99);
  flags.add_int("--tensor-model-parallel-size", &v.tensor_parallel,
                "ranks of one tensor-parallel group (Megatron's t: consecutive ranks inside one node); the "
                "world is t x pipeline stages x data-parallel size",
                1, 1 << 20);
  flags.add_int(
      "--pipeline-model-parallel-size", &o.pipeline.stages,
      "pipeline stages (Megatron's p): each runs its layers (the first the embeddings, the last the "
      "head) on t x d ranks, 1F1B unless interleaved",
      1, 1 << 20);
  flags.add_int("--decoder-first-pipeline-num-layers", &o.pipeline.first_stage_layers,
                "layers of the first pipeline stage (default: an even share)", 1, 1 << 20);
  flags.add_int("--decoder-last-pipeline-num-layers", &o.pipeline.last_stage_layers,
                "layers of the last pipeline stage, which also runs the LM head (default: an even share)", 1,
                1 << 20);
  flags.add_int("--num-layers-per-virtual-pipeline-stage", &o.pipeline.layers_per_virtual_stage,
                "layers per model chunk of the interleaved schedule (default: 1F1B, one chunk per stage)", 1,
                1 << 20);
  flags.add_switch("--sequence-parallel", &v.sequence_parallel,
                   "LayerNorm and dropout on 1/t of the sequence (needs --tensor-model-parallel-size > 1; "
                   "at 1 it is turned off with a note, as Megatron does)");
}

void add_optimization_group(FlagParser& flags, TrainOptions& o, Values& v) {
  flags.group("Batch and optimization");
  flags.add_int("--micro-batch-size", &v.micro, "sequences per rank per micro-step", 1, 1 << 20);
  flags.add_alias("--batch-size", "--micro-batch-size");
  flags.add_int64("--global-batch-size", &v.global,
                  "sequences per optimizer step over all ranks (unset: micro-batch x data-parallel ranks)", 1,
                  int64_t(1) << 40);
  flags.add_int("--train-iters", &o.train_iters, "optimizer steps (0: start up, load or plan, and stop)", 0,
                1 << 30);
  flags.add_double("--lr", &v.lr, "peak learning rate", 0.0, 10.0);
  flags.add_double("--min-lr", &v.min_lr, "learning rate at the end of the decay", 0.0, 10.0);
  flags.add_string("--lr-decay-style", &v.decay_style, "constant | linear | cosine");
  flags.add_int64("--lr-warmup-iters", &v.warmup, "linear warmup steps from 0 to --lr", 0, int64_t(1) << 40);
  flags.add_int64("--lr-decay-iters", &v.decay_iters,
                  "step where the decay reaches --min-lr (default --train-iters)", 0, int64_t(1) << 40);
  flags.add_double("--weight-decay", &v.weight_decay,
                   "AdamW decoupled weight decay (not on biases/LayerNorm)", 0.0, 10.0);
  flags.add_double("--clip-grad", &v.clip, "global gradient-norm clipping, 0 = off", 0.0, 1e9);
  flags.add_double("--adam-beta1", &v.beta1, "Adam beta1", 0.0, 0.999999);
  flags.add_double("--adam-beta2", &v.beta2, "Adam beta2", 0.0, 0.999999);
  flags.add_double("--adam-eps", &v.eps, "Adam epsilon", 0.0, 1.0);
  flags.add_int64("--seed", &o.seed, "initialization, data order and dropout seed", 0, INT64_MAX);
}

// Megatron's activation recomputation flags, resolved by resolve_recompute().
void add_recompute_flags(FlagParser& flags, Values& v) {
  flags.add_switch("--checkpoint-activations", &v.checkpoint,
                   "keep only block inputs, recompute each block in backward (= --recompute-granularity full "
                   "--recompute-method uniform --recompute-num-layers 1)");
  flags.add_string(
      "--recompute-granularity", &v.recompute_granularity,
      "full: keep only the inputs of chunks of blocks, recompute a chunk in backward | selective: "
      "recompute only the attention core (softmax(QK^T), its dropout)");
  flags.add_switch("--recompute-activations", &v.recompute_activations,
                   "Megatron's alias of --recompute-granularity selective");
  flags.add_string("--recompute-method", &v.recompute_method,
                   "with full: uniform (chunks of N consecutive blocks; default) | block (the first N blocks "
                   "recomputed one at a time, the others keep everything)");
  // Any int is taken here, so that the range error names --num-layers (resolve_recompute).
  flags.add_int("--recompute-num-layers", &v.recompute_num_layers, "with full: the N of --recompute-method",
                -(1 << 30), 1 << 30);
  flags.add_switch("--distribute-saved-activations", &v.distribute_saved_activations,
                   "with full recomputation and --tensor-model-parallel-size t > 1: each rank keeps 1/t of "
                   "every checkpointed block input");
  flags.add_switch("--deepspeed-activation-checkpointing", &v.ds_checkpointing,
                   "accepted (the tutorial's); recomputation is turned on by --recompute-granularity or "
                   "--checkpoint-activations");
}

void add_precision_and_cluster_groups(FlagParser& flags, TrainOptions& o, Values& v) {
  flags.group("Precision and memory");
  flags.add_switch("--fp16", &v.fp16, "fp16 compute weights and gradients, dynamic loss scaling");
  flags.add_switch("--bf16", &v.bf16, "bf16 compute weights and gradients");
  add_recompute_flags(flags, v);
  flags.add_int(
      "--tile-factor", &v.tile_factor,
      "memory-centric tiling: each block matrix in N tiles of output rows, gathered and computed "
      "one at a time (stage 3's peak drops about N-fold; hidden a multiple of 16 x N, at least 32 x N)",
      1, 1 << 16);
  flags.group("ZeRO and the cluster");
  flags.add_int("--zero-stage", &v.stage, "0 data parallel, 1 +optimizer states, 2 +gradients, 3 +weights",
                -1000, 1000);
  flags.add_string("--deepspeed_config", &o.deepspeed_config, "DeepSpeed JSON config file");
  flags.add_switch("--deepspeed", &v.deepspeed, "accepted for DeepSpeed command lines; does nothing");
  flags.add_switch("--use-flash-attn", &v.flash_attention,
                   "accepted for Megatron command lines: attention always runs our own fused kernel");
  flags.add_int("--ranks-per-node", &o.ranks_per_node,
                "simulate nodes of K consecutive ranks (0 = real nodes)", 0, 1 << 20);
  flags.add_double("--comm-timeout", &o.comm_timeout,
                   "seconds a collective may make no progress before the rank names it and aborts the job "
                   "(0 = never)",
                   0, 1e9);
  flags.add_int("--distributed-timeout-minutes", &v.timeout_minutes,
                "Megatron's spelling of --comm-timeout, in minutes", 0, 1 << 20);
  flags.add_int("--threads", &o.threads, "CPU threads per rank (0 = all cores)", 0, 1024);
  flags.add_string("--memory-limit", &v.memory_limit,
                   "the machine's memory this job may use, e.g. 12GiB, shared by its ranks on the machine "
                   "(default: MemAvailable); a run that would not fit stops before allocating");
  flags.add_string(
      "--device", &o.device,
      "cpu | cuda: where the model's state lives and computes (cuda: one GPU per rank, rank r of a "
      "node on GPU r mod the GPUs present; needs a --config=cuda build)");
}

void add_data_and_logging_groups(FlagParser& flags, TrainOptions& o) {
  flags.group("Data");
  flags.add_string("--data-path", &o.data_path, "a token shard, or a glob of shards ('data/train_*.bin')");
  flags.add_string("--valid-data-path", &o.valid_data_path,
                   "validation shards (else --split of --data-path)");
  flags.add_string("--split", &o.split, "train,validation,test weights of --data-path's windows");
  flags.add_string("--vocab-file", &o.vocab_file,
                   "GPT-2 encoder.json (for sample text; default $GPT_DATA_DIR)");
  flags.add_string("--merge-file", &o.merge_file, "GPT-2 vocab.bpe (for sample text; default $GPT_DATA_DIR)");
  flags.group("Logging and evaluation");
  flags.add_int("--log-interval", &o.log_interval, "a progress line every N steps", 1, 1 << 30);
  flags.add_int("--eval-interval", &o.eval_interval, "validation loss every N steps and at the end", 1,
                1 << 30);
  flags.add_int("--eval-iters", &o.eval_iters, "validation batches per evaluation", 1, 1 << 30);
  flags.add_string("--metrics-file", &o.metrics_file, "JSON Lines: every step and every validation (rank 0)");
}

void add_checkpoint_and_plan_groups(FlagParser& flags, TrainOptions& o, Values& v) {
  flags.group("Checkpoints and initialization");
  flags.add_string("--save", &o.save, "checkpoint directory (DIR/global_stepN, DIR/latest)");
  flags.add_int("--save-interval", &o.save_interval, "a checkpoint every N steps (0: at the end only)", 0,
                1 << 30);
  flags.add_int("--keep-checkpoints", &o.keep_checkpoints, "keep the newest K checkpoints (0: all)", 0,
                1 << 30);
  flags.add_string("--load", &o.load, "resume from DIR/latest (any world size with the same global batch)");
  flags.add_switch("--finetune", &o.finetune,
                   "with --load or --init-from: weights only; step and optimizer fresh");
  flags.add_string("--init-from", &o.init_from,
                   "start from an llm.c GPT-2 model file or a Hugging Face model.safetensors (gpt_export "
                   "writes both)");
  flags.add_int("--exit-interval", &o.exit_interval, "save and stop when the step is a multiple of N", 0,
                1 << 30);
  flags.add_double(
      "--exit-duration-in-mins", &o.exit_duration_in_mins,
      "save and stop after the first step that starts M minutes after the program did (0: never)", 0.0, 1e9);
  flags.group("Planning (no training)");
  flags.add_switch("--plan", &o.plan.enabled,
                   "print memory, bytes and time per step for a cluster, then exit");
  flags.add_int("--nodes", &o.plan.nodes, "nodes of the planned cluster", 1, 1 << 20);
  flags.add_int("--gpus-per-node", &o.plan.gpus_per_node, "GPUs per node of the planned cluster", 1, 1 << 20);
  flags.add_string("--gpu-memory", &v.gpu_memory, "memory per GPU, e.g. 32GB");
  flags.add_string("--intra-node-bandwidth", &v.intra_bw, "per-GPU bandwidth inside a node, e.g. 150GB/s");
  flags.add_string("--inter-node-bandwidth", &v.inter_bw, "per-node network bandwidth, e.g. 100Gb/s");
  flags.add_double("--gpu-tflops", &o.plan.gpu_tflops, "achievable fp16 TFLOP/s per GPU", 0.001, 1e6);
  flags.add_string("--nvme-read-bandwidth", &v.nvme_read_bw,
                   "read rate of a node's offload disk, shared by its GPUs (reads and writes differ; "
                   "default: this machine's, one O_DIRECT stream)");
  flags.add_string("--nvme-write-bandwidth", &v.nvme_write_bw,
                   "write rate of a node's offload disk, shared by its GPUs (default: this machine's)");
  flags.group(
      "Planning: host work per rank (bench/calibrate measures these on a CPU cluster; default 0: "
      "not counted, as on GPUs)");
  flags.add_string("--host-comm-bandwidth", &v.host_comm_bw,
                   "bytes a rank sends per second of its own CPU (MPI over TCP), e.g. 400MB/s");
  flags.add_double("--decode-rate", &o.plan.decode_elements_per_s,
                   "fp16/bf16 gathered elements a rank turns into compute weights per second", 0, 1e15);
  flags.add_double("--dequantize-rate", &o.plan.dequantize_elements_per_s,
                   "int8/int4 elements a rank dequantizes per second (qwZ, qgZ)", 0, 1e15);
  flags.add_double("--quantize-rate", &o.plan.quantize_elements_per_s,
                   "elements a rank quantizes per second (qwZ, qgZ)", 0, 1e15);
  flags.add_double("--reduce-rate", &o.plan.reduce_elements_per_s,
                   "gradient elements a rank sums into a reduce-scatter per second", 0, 1e15);
  flags.add_double("--optimizer-rate", &o.plan.optimizer_elements_per_s,
                   "shard elements a rank's AdamW (and its compute copy) updates per second", 0, 1e15);
  flags.add_string("--buffer-fill-bandwidth", &v.buffer_bw,
                   "bytes of zero-filled buffers a rank allocates and frees per second (the gradient "
                   "reduction's, every micro-step), e.g. 3GB/s");
  flags.add_double("--link-latency-us", &o.plan.link_latency_s,
                   "latency of one message step of a collective, microseconds", 0, 1e9);
}

// A flag given on the command line wins over the JSON key; a banner note says so when both were given and
// differ.
class FlagOrJson {
 public:
  FlagOrJson(const FlagParser& flags, const DeepSpeedConfig& ds, std::vector<std::string>& notes)
      : flags_(flags), ds_(ds), notes_(notes) {}

  template <typename T>
  std::optional<T> operator()(const char* flag, T flag_value, const char* key,
                              std::optional<T> json_value) const {
    if (!flags_.given(flag)) return json_value;
    if (json_value && *json_value != flag_value) {
      std::ostringstream note;
      note << flag << " " << flag_value << " (command line) overrides " << key << " " << *json_value
           << " from " << ds_.path;
      notes_.push_back(note.str());
    }
    return flag_value;
  }

 private:
  const FlagParser& flags_;
  const DeepSpeedConfig& ds_;
  std::vector<std::string>& notes_;
};

void resolve_timeout(const FlagParser& flags, const Values& v, TrainOptions& o) {
  if (!flags.given("--distributed-timeout-minutes")) return;
  if (flags.given("--comm-timeout")) {
    throw UsageError(
        "--comm-timeout and --distributed-timeout-minutes set the same timeout; give one of them");
  }
  o.comm_timeout = 60.0 * v.timeout_minutes;
}

// The tensor-parallel layout's rules (ParallelLayout::problems) on what is resolved so far: asked when t is
// known, again once --sequence-parallel is, and once more after the tile factor, so that each rule is
// reported as soon as its settings are given.
void check_layout(const TrainOptions& o) {
  const ParallelLayout layout{.tensor_parallel = o.tensor_parallel,
                              .ranks_per_node = std::max(o.ranks_per_node, 0),
                              .sequence_parallel = o.zero.sequence_parallel,
                              .tile_factor = o.zero.tile_factor};
  if (std::string problem = first_problem(layout.problems(o.model)); !problem.empty())
    throw UsageError(problem);
}

// Tensor and pipeline parallelism's sizes against the world and the model: returns the data-parallel size.
int check_parallelism(const Values& v, int world_size, const TrainOptions& o) {
  const int t = v.tensor_parallel, p = o.pipeline.stages;
  if (std::string problem = first_problem(o.pipeline.problems(o.model)); !problem.empty())
    throw UsageError(problem);
  if (world_size % t != 0) {
    throw UsageError("--tensor-model-parallel-size " + str(t) + " does not divide the world size " +
                     str(world_size) + "; choose a divisor of the number of ranks");
  }
  if (world_size % (t * p) != 0) {
    throw UsageError("--tensor-model-parallel-size " + str(t) + " x --pipeline-model-parallel-size " +
                     str(p) + " = " + str(t * p) + " does not divide the world size " + str(world_size) +
                     "; choose sizes whose product divides the number of ranks");
  }
  check_layout(o);
  return world_size / (t * p);
}

// The pipeline's micro-batches per step (the accumulation steps: global batch / (micro-batch x d)) against
// its schedule.
void check_pipeline(const TrainOptions& o) {
  const int p = o.pipeline.stages;
  if (p == 1) return;
  if (std::string problem =
          pipeline_schedule_problem(p, o.pipeline.virtual_stages(o.model), o.accumulation_steps);
      !problem.empty()) {
    throw UsageError(problem);
  }
}

// The plan is for the described cluster, not for the processes running this command: returns its size.
int apply_plan(const Values& v, int world_size, TrainOptions& o) {
  if (!v.memory_limit.empty()) o.memory_limit_bytes = parse_bytes(v.memory_limit, "--memory-limit");
  if (!o.plan.enabled) return world_size;
  o.plan.nvme_read_bytes_per_s = parse_rate(v.nvme_read_bw, "--nvme-read-bandwidth");
  o.plan.nvme_write_bytes_per_s = parse_rate(v.nvme_write_bw, "--nvme-write-bandwidth");
  o.ranks_per_node = o.plan.gpus_per_node;
  o.plan.gpu_memory_bytes = parse_bytes(v.gpu_memory, "--gpu-memory");
  o.plan.intra_node_bytes_per_s = parse_rate(v.intra_bw, "--intra-node-bandwidth");
  o.plan.inter_node_bytes_per_s = parse_rate(v.inter_bw, "--inter-node-bandwidth");
  if (!v.host_comm_bw.empty())
    o.plan.host_comm_bytes_per_s = parse_rate(v.host_comm_bw, "--host-comm-bandwidth");
  if (!v.buffer_bw.empty()) o.plan.buffer_bytes_per_s = parse_rate(v.buffer_bw, "--buffer-fill-bandwidth");
  o.plan.link_latency_s *= 1e-6;  // the flag's microseconds
  return o.plan.nodes * o.plan.gpus_per_node;
}

void resolve_stage_and_batch(const FlagOrJson& pick, const DeepSpeedConfig& ds, const Values& v,
                             int world_size, TrainOptions& o) {
  o.zero.stage =
      int(pick("--zero-stage", int64_t(v.stage), "zero_optimization.stage", ds.zero_stage).value_or(0));
  if (o.zero.stage < 0 || o.zero.stage > 3) {
    throw UsageError("--zero-stage is " + str(o.zero.stage) + "; ZeRO stages are 0, 1, 2 and 3");
  }
  resolve_batch(pick("--micro-batch-size", int64_t(v.micro), "train_micro_batch_size_per_gpu",
                     ds.train_micro_batch_size_per_gpu),
                ds.gradient_accumulation_steps,
                pick("--global-batch-size", v.global, "train_batch_size", ds.train_batch_size), world_size,
                &o);
  o.zero.gradient_clipping =
      pick("--clip-grad", v.clip, "gradient_clipping", ds.gradient_clipping).value_or(v.clip);
}

void resolve_precision(const DeepSpeedConfig& ds, const Values& v, TrainOptions& o) {
  const bool use_fp16 = v.fp16 || (!v.bf16 && ds.fp16_enabled.value_or(false));
  const bool use_bf16 = v.bf16 || (!v.fp16 && ds.bf16_enabled.value_or(false));
  if (use_fp16 && use_bf16) {
    throw UsageError(
        "both fp16 and bf16 are enabled; choose one (--fp16 or --bf16, or one \"enabled\": true)");
  }
  o.zero.precision = use_fp16 ? DType::kF16 : use_bf16 ? DType::kBF16 : DType::kF32;
  LossScalerConfig& ls = o.zero.loss_scaler;
  ls.loss_scale = ds.loss_scale.value_or(ls.loss_scale);
  ls.initial_scale_power = int(ds.initial_scale_power.value_or(ls.initial_scale_power));
  ls.loss_scale_window = int(ds.loss_scale_window.value_or(ls.loss_scale_window));
  ls.hysteresis = int(ds.hysteresis.value_or(ls.hysteresis));
  ls.min_loss_scale = ds.min_loss_scale.value_or(ls.min_loss_scale);
}

// Buckets, overlap and ZeRO++ from the JSON's zero_optimization.
void resolve_zero_keys(const DeepSpeedConfig& ds, TrainOptions& o) {
  o.zero.reduce_bucket_size = ds.reduce_bucket_size.value_or(o.zero.reduce_bucket_size);
  o.zero.overlap_comm = ds.overlap_comm.value_or(o.zero.stage == 3);  // DeepSpeed: on by default for stage 3
  o.zero.quantized_weights = ds.zero_quantized_weights.value_or(false);
  o.zero.hpz_partition_size = int(ds.zero_hpz_partition_size.value_or(1));
  o.zero.quantized_gradients = ds.zero_quantized_gradients.value_or(false);
  o.zero.hierarchical_allgather = ds.zero_hierarchical_allgather.value_or(false);
  o.zero.gather_once_per_step = ds.stage3_gather_once_per_step.value_or(false);
  // An int setting that ZeroConfig::problems validates (naming the fix); clamped so that the message shows
  // it.
  auto int_setting = [](std::optional<int64_t> v, int fallback) {
    return v ? int(std::clamp<int64_t>(*v, -(int64_t(1) << 30), int64_t(1) << 30)) : fallback;
  };
  o.zero.weight_block = int_setting(ds.zeropp_weight_block_size, o.zero.weight_block);
  o.zero.gradient_block = int_setting(ds.zeropp_gradient_block_size, o.zero.gradient_block);
  o.zero.intra_node_gradient_bits =
      int_setting(ds.zeropp_intra_node_gradient_bits, o.zero.intra_node_gradient_bits);
  o.zero.loco = ds.zeropp_loco;
  o.zero.loco_err_beta = ds.loco_err_beta.value_or(o.zero.loco_err_beta);
  o.zero.loco_reset_T = ds.loco_reset_T.value_or(o.zero.loco_reset_T);
}

// --recompute-granularity, its alias --recompute-activations and the older --checkpoint-activations (full):
// "", "full" or "selective". Megatron lets --recompute-activations silently win; we refuse contradictions.
std::string recompute_granularity(const FlagParser& flags, const Values& v) {
  std::string granularity = v.recompute_granularity;
  if (flags.given("--recompute-granularity") && granularity != "full" && granularity != "selective")
    throw UsageError("--recompute-granularity is '" + granularity + "'; choose full or selective");
  if (v.recompute_activations) {
    if (granularity == "full" || v.checkpoint) {
      throw UsageError(std::string("--recompute-activations (selective recomputation) and ") +
                       (v.checkpoint ? "--checkpoint-activations" : "--recompute-granularity full") +
                       " (full recomputation) contradict; give one of them");
    }
    granularity = "selective";
  }
  if (v.checkpoint) {
    if (granularity == "selective") {
      throw UsageError(
          "--checkpoint-activations (full recomputation) and --recompute-granularity selective contradict; "
          "give one of them");
    }
    granularity = "full";
  }
  return granularity;
}

// The granularity with --recompute-method and --recompute-num-layers, which only full recomputation takes.
// Megatron requires both with full; we default to uniform 1, the meaning of --checkpoint-activations.
Recompute resolve_recompute(const FlagParser& flags, const Values& v, int layers) {
  const std::string granularity = recompute_granularity(flags, v);
  const std::string& method = v.recompute_method;
  if (flags.given("--recompute-method") && method != "uniform" && method != "block")
    throw UsageError("--recompute-method is '" + method + "'; choose uniform or block");
  for (const std::string flag : {"--recompute-method", "--recompute-num-layers"}) {
    if (!flags.given(flag) || granularity == "full") continue;
    if (granularity == "selective") {
      throw UsageError(flag +
                       " applies to --recompute-granularity full; selective recomputation recomputes every "
                       "layer's attention core: drop " +
                       flag);
    }
    throw UsageError(flag + " is given without recomputation: add --recompute-granularity full");
  }
  if (granularity != "full") return granularity == "selective" ? Recompute::selective() : Recompute{};
  const bool block = method == "block";
  const int n = v.recompute_num_layers, lowest = block ? 0 : 1;
  if (n < lowest || n > layers) {
    throw UsageError("--recompute-num-layers " + str(n) + " is outside [" + str(lowest) + ", " + str(layers) +
                     "] for --recompute-method " + (block ? "block" : "uniform") + " with --num-layers " +
                     str(layers) + "; choose a value in that range");
  }
  return Recompute::full(block ? RecomputeMethod::kBlock : RecomputeMethod::kUniform, n);
}

// Partitioned activation checkpoints (--distribute-saved-activations, or the JSON's partition_activations),
// with Megatron's rules, each with its own message; `source` names where the request came from.
void check_distribute_saved(const std::string& source, const TrainOptions& o) {
  if (o.tensor_parallel < 2) {
    throw UsageError(source +
                     " partitions checkpointed activations over the tensor-parallel group: it needs "
                     "--tensor-model-parallel-size > 1");
  }
  if (!o.zero.recompute.is_full()) {
    throw UsageError(source +
                     " partitions the block inputs that full recomputation keeps: it needs "
                     "--recompute-granularity full (or --checkpoint-activations)");
  }
  if (o.zero.sequence_parallel) {
    throw UsageError(source +
                     " cannot be combined with --sequence-parallel, which already splits the block inputs "
                     "over the tensor-parallel group (Megatron's rule); drop one of them");
  }
}

// --sequence-parallel and partitioned activation checkpoints: what tensor parallelism adds to activation
// memory. At t = 1 both have nothing to split over.
void resolve_tensor_parallel_memory(const DeepSpeedConfig& ds, const Values& v, TrainOptions& o) {
  const int t = o.tensor_parallel;
  o.zero.sequence_parallel = v.sequence_parallel && t > 1;
  if (v.sequence_parallel && t == 1) {
    o.notes.push_back(
        "--sequence-parallel turned off: it needs --tensor-model-parallel-size > 1 (Megatron does the same)");
  }
  check_layout(o);
  if (v.distribute_saved_activations) check_distribute_saved("--distribute-saved-activations", o);
  o.zero.distribute_saved_activations = v.distribute_saved_activations;
  if (!ds.partition_activations.value_or(false) || o.zero.distribute_saved_activations) return;
  // Without a group to split over or full recomputation's checkpoints to split, the key is without effect
  // (without_effect_table).
  if (t > 1 && o.zero.recompute.is_full()) {
    check_distribute_saved(ds.path + ": activation_checkpointing.partition_activations", o);
    o.zero.distribute_saved_activations = true;
  }
}

// cpu_checkpointing moves full recomputation's checkpoints (without --sequence-parallel) to host memory on
// the GPU; elsewhere it and the rest of DeepSpeed's activation_checkpointing keys are without effect
// (without_effect_table).
void resolve_cpu_checkpointing(const DeepSpeedConfig& ds, TrainOptions& o) {
  if (ds.cpu_checkpointing.value_or(false) && o.device == "cuda" && o.zero.recompute.is_full() &&
      !o.zero.sequence_parallel) {
    o.zero.recompute.checkpoints_on_host = true;
  }
}

// Activation recomputation and partitioning: Megatron's flags, then DeepSpeed's activation_checkpointing
// keys, which configure how checkpointing works (it is turned on by the flags, as in Megatron-DeepSpeed).
void resolve_activations(const FlagParser& flags, const DeepSpeedConfig& ds, const Values& v,
                         TrainOptions& o) {
  o.zero.recompute = resolve_recompute(flags, v, o.model.num_layers);
  if (v.ds_checkpointing && o.zero.recompute.granularity == RecomputeGranularity::kNone) {
    o.notes.push_back(
        "--deepspeed-activation-checkpointing accepted: recomputation is turned on by "
        "--recompute-granularity full|selective (or --checkpoint-activations)");
  }
  resolve_tensor_parallel_memory(ds, v, o);
  resolve_cpu_checkpointing(ds, o);
}

OffloadDevice offload_device(const std::optional<std::string>& name) {
  if (name == "cpu") return OffloadDevice::kCpu;
  if (name == "nvme") return OffloadDevice::kNvme;
  return OffloadDevice::kNone;
}

// The swap folders' run id: the same for every restart of one run, so that a killed run's folder is found and
// removed, and different for runs that checkpoint to different places: FNV-1a of the absolute checkpoint
// folder (--save, or --load when resuming without --save).
std::string offload_run_id(const std::string& save, const std::string& load) {
  const std::string& folder = save.empty() ? load : save;
  std::string where = folder.empty() ? std::string("(no checkpoint folder)")
                                     : std::filesystem::absolute(folder).lexically_normal().string();
  while (where.size() > 1 && where.back() == '/') where.pop_back();  // "ckpt/" and "ckpt" are one folder
  uint64_t hash = 1469598103934665603ull;
  for (unsigned char c : where) hash = (hash ^ c) * 1099511628211ull;
  char id[32];
  std::snprintf(id, sizeof id, "gpt_train-%08x", unsigned(hash ^ (hash >> 32)));
  return id;
}

// A device "nvme" needs its nvme_path. The rules on the stage and the buffers are OffloadConfig::problems,
// asked once the model is known.
void check_offload_paths(const OffloadConfig& f, const std::string& path) {
  const std::string o = "zero_optimization.offload_optimizer", p = "zero_optimization.offload_param";
  if (f.optimizer_on_nvme() && f.optimizer_nvme_path.empty())
    throw UsageError(path + ": " + o + ".device is \"nvme\" but " + o + ".nvme_path is missing; add it");
  if (f.param_on_nvme() && f.param_nvme_path.empty())
    throw UsageError(path + ": " + p + ".device is \"nvme\" but " + p + ".nvme_path is missing; add it");
}

void note_offload(const DeepSpeedConfig& ds, const OffloadConfig& f, std::vector<std::string>& notes) {
  const std::string from = " (" + ds.path + ")";
  if (f.optimizer == OffloadDevice::kCpu || f.param == OffloadDevice::kCpu) {
    notes.push_back(
        "offload device \"cpu\": on the CPU backend the state already lives in host memory, so it "
        "stays where it is" +
        from);
  }
  if (ds.offload_optimizer_pipeline_read || ds.offload_optimizer_pipeline_write) {
    notes.push_back(
        "offload_optimizer.pipeline_read/pipeline_write accepted: the swapper always overlaps reads "
        "and writes with the update" +
        from);
  }
}

// ZeRO-Infinity's keys: zero_optimization.offload_optimizer, .offload_param, .sub_group_size, and aio.
void resolve_offload_keys(const DeepSpeedConfig& ds, TrainOptions& o) {
  OffloadConfig& f = o.zero.offload;
  f.optimizer = offload_device(ds.offload_optimizer_device);
  f.optimizer_nvme_path = ds.offload_optimizer_nvme_path.value_or("");
  f.pin_memory = ds.offload_optimizer_pin_memory.value_or(f.pin_memory);
  f.optimizer_buffer_count = int(ds.offload_optimizer_buffer_count.value_or(f.optimizer_buffer_count));
  f.fast_init = ds.offload_optimizer_fast_init.value_or(f.fast_init);
  f.pipeline_read = ds.offload_optimizer_pipeline_read.value_or(f.pipeline_read);
  f.pipeline_write = ds.offload_optimizer_pipeline_write.value_or(f.pipeline_write);
  f.ratio = ds.offload_optimizer_ratio.value_or(f.ratio);
  f.param = offload_device(ds.offload_param_device);
  f.param_nvme_path = ds.offload_param_nvme_path.value_or("");
  f.param_buffer_count = int(ds.offload_param_buffer_count.value_or(f.param_buffer_count));
  f.param_buffer_size = ds.offload_param_buffer_size.value_or(f.param_buffer_size);
  f.max_in_cpu = ds.offload_param_max_in_cpu.value_or(f.max_in_cpu);
  f.sub_group_size = ds.sub_group_size.value_or(f.sub_group_size);
  f.aio.block_size = ds.aio_block_size.value_or(f.aio.block_size);
  f.aio.queue_depth = int(ds.aio_queue_depth.value_or(f.aio.queue_depth));
  f.aio.thread_count = int(ds.aio_thread_count.value_or(f.aio.thread_count));
  f.aio.single_submit = ds.aio_single_submit.value_or(f.aio.single_submit);
  f.aio.overlap_events = ds.aio_overlap_events.value_or(f.aio.overlap_events);
  f.aio.use_gds = ds.aio_use_gds.value_or(f.aio.use_gds);
  f.run_id = offload_run_id(o.save, o.load);
  check_offload_paths(f, ds.path);
  note_offload(ds, f, o.notes);
}

// Memory-centric tiling: --tile-factor or zero_optimization.memory_centric_tiling_factor, checked against
// the model (which check_whole has validated). Below stage 3 the weights are whole on every rank, so tiling
// only splits the compute: said at start-up.
void resolve_tiling(const FlagParser& flags, const FlagOrJson& pick, const DeepSpeedConfig& ds,
                    const Values& v, TrainOptions& o) {
  const char* key = "zero_optimization.memory_centric_tiling_factor";
  o.zero.tile_factor =
      int(pick("--tile-factor", int64_t(v.tile_factor), key, ds.memory_centric_tiling_factor).value_or(1));
  const std::string source = flags.given("--tile-factor")
                                 ? "--tile-factor " + str(o.zero.tile_factor)
                                 : ds.path + ": " + key + " " + str(o.zero.tile_factor);
  if (std::string problem = tile_factor_problem(o.model, o.zero.tile_factor); !problem.empty())
    throw UsageError(source + ": " + problem);
  if (o.zero.tile_factor > 1 && o.zero.stage < 3) {
    o.notes.push_back(source + ": at stage " + str(o.zero.stage) +
                      " the weights are whole on every rank, so tiling only splits the compute; its memory "
                      "saving needs --zero-stage 3");
  }
}

// Optimizer: DeepSpeed's "Adam" is AdamW unless adam_w_mode is false.
void resolve_adam(const FlagOrJson& pick, const DeepSpeedConfig& ds, const Values& v, TrainOptions& o) {
  AdamWHyper& adam = o.zero.adam;
  adam.beta1 =
      pick("--adam-beta1", v.beta1, "optimizer.params.betas[0]", ds.optimizer_beta1).value_or(v.beta1);
  adam.beta2 =
      pick("--adam-beta2", v.beta2, "optimizer.params.betas[1]", ds.optimizer_beta2).value_or(v.beta2);
  adam.eps = pick("--adam-eps", v.eps, "optimizer.params.eps", ds.optimizer_eps).value_or(v.eps);
  adam.weight_decay =
      pick("--weight-decay", v.weight_decay, "optimizer.params.weight_decay", ds.optimizer_weight_decay)
          .value_or(v.weight_decay);
  adam.decoupled = !(ds.optimizer_type.value_or("AdamW") == "Adam" && !ds.adam_w_mode.value_or(true));
  if (!adam.decoupled) o.notes.push_back("optimizer: Adam with L2 regularization (adam_w_mode false)");
}

// The JSON scheduler, used when no --lr-* schedule flag was given.
void json_schedule(const DeepSpeedConfig& ds, LrSchedule& sched) {
  const std::string& t = *ds.scheduler_type;
  sched.kind = t == "WarmupLR"        ? LrSchedule::Kind::kWarmupLR
               : t == "WarmupDecayLR" ? LrSchedule::Kind::kWarmupDecayLR
                                      : LrSchedule::Kind::kWarmupCosineLR;
  sched.warmup_min_lr = ds.warmup_min_lr.value_or(0.0);
  sched.warmup_max_lr = ds.warmup_max_lr.value_or(0.001);
  sched.warmup_steps = ds.warmup_num_steps.value_or(1000);
  sched.warmup_type = ds.warmup_type.value_or("log");
  sched.warmup_min_ratio = ds.warmup_min_ratio.value_or(0.0);
  sched.cos_min_ratio = ds.cos_min_ratio.value_or(0.0001);
  if (sched.kind != LrSchedule::Kind::kWarmupLR && !ds.total_num_steps) {
    throw UsageError(ds.path + ": scheduler.params.total_num_steps is required for " + t);
  }
  sched.total_steps = ds.total_num_steps.value_or(0);
}

// Learning rate: Megatron's flags, or the JSON scheduler when one is given and no schedule flag is.
void resolve_schedule(const FlagParser& flags, const FlagOrJson& pick, const DeepSpeedConfig& ds,
                      const Values& v, TrainOptions& o) {
  LrSchedule& sched = o.schedule;
  sched.lr = pick("--lr", v.lr, "optimizer.params.lr", ds.optimizer_lr).value_or(v.lr);
  sched.min_lr = v.min_lr;
  if (v.decay_style != "constant" && v.decay_style != "linear" && v.decay_style != "cosine") {
    throw UsageError("--lr-decay-style is '" + v.decay_style + "'; choose constant, linear or cosine");
  }
  sched.decay_style = v.decay_style;
  sched.warmup_steps = v.warmup;
  sched.decay_steps = v.decay_iters > 0 ? v.decay_iters : o.train_iters;
  const bool schedule_flags = flags.given("--lr-decay-style") || flags.given("--lr-warmup-iters") ||
                              flags.given("--min-lr") || flags.given("--lr-decay-iters");
  if (ds.scheduler_type && schedule_flags) {
    o.notes.push_back("the --lr-* flags (command line) override scheduler " + *ds.scheduler_type + " from " +
                      ds.path);
  } else if (ds.scheduler_type) {
    json_schedule(ds, sched);
  }
  if (!flags.given("--log-interval") && ds.steps_per_print) o.log_interval = int(*ds.steps_per_print);
  o.wall_clock_breakdown = ds.wall_clock_breakdown.value_or(false);
}

// The checks on the whole that need no JSON: the shape, the split, and (unless planning) data and topology.
void check_whole(int world_size, TrainOptions& o) {
  if (std::string problem = o.model.validate(); !problem.empty()) throw UsageError(problem);
  std::tie(o.split_train, o.split_valid) = split_fractions(o.split);
  if (o.plan.enabled) return;  // planning needs no data
  if (o.data_path.empty())
    throw UsageError("--data-path is required: give a token shard or a glob of shards");
  if (o.ranks_per_node > 0 && world_size % o.ranks_per_node != 0) {
    throw UsageError("--ranks-per-node " + str(o.ranks_per_node) + " does not divide the world size " +
                     str(world_size) + "; choose a divisor of the number of ranks");
  }
  if (!o.init_from.empty() && !o.load.empty()) {
    throw UsageError(
        "--init-from and --load both given; use --load to resume a checkpoint or --init-from to start "
        "from a model file");
  }
}

}  // namespace

TrainFlags::TrainFlags(FlagParser& flags, TrainOptions* options) : flags_(flags), o_(*options) {
  o_.zero.hidden_dropout = 0.1;  // Megatron's and GPT-2's default
  o_.zero.attention_dropout = 0.1;
  add_model_group(flags, o_, v_);
  add_optimization_group(flags, o_, v_);
  add_precision_and_cluster_groups(flags, o_, v_);
  add_data_and_logging_groups(flags, o_);
  add_checkpoint_and_plan_groups(flags, o_, v_);
}

void TrainFlags::finish(int world_size) {
  o_.tensor_parallel = v_.tensor_parallel;
  resolve_timeout(flags_, v_, o_);
  world_size = apply_plan(v_, world_size, o_);
  const int data_parallel = check_parallelism(v_, world_size, o_);
  DeepSpeedConfig ds;
  if (!o_.deepspeed_config.empty()) ds = read_deepspeed_config(o_.deepspeed_config);
  for (const std::string& w : ds.warnings) o_.notes.push_back(ds.path + ": " + w);
  const FlagOrJson pick(flags_, ds, o_.notes);
  resolve_stage_and_batch(pick, ds, v_, data_parallel, o_);
  resolve_precision(ds, v_, o_);
  resolve_activations(flags_, ds, v_, o_);
  resolve_zero_keys(ds, o_);
  resolve_offload_keys(ds, o_);
  resolve_adam(pick, ds, v_, o_);
  resolve_schedule(flags_, pick, ds, v_, o_);
  check_whole(world_size, o_);
  resolve_tiling(flags_, pick, ds, v_, o_);
  check_layout(o_);
  if (std::string problem =
          first_problem(o_.zero.offload.problems(o_.zero, o_.model, data_parallel, o_.tensor_parallel));
      !problem.empty()) {
    throw UsageError(ds.path.empty() ? problem : ds.path + ": " + problem);
  }
  note_without_effect(ds, v_, o_);
  check_pipeline(o_);
}

bool parse_train_options(int argc, const char* const* argv, int world_size, TrainOptions* options) {
  FlagParser flags(
      "gpt_train",
      "Trains GPT-2 with ZeRO / ZeRO++ over MPI: mpiexec -n N gpt_train [flags] (see docs/training.md).");
  TrainFlags train(flags, options);
  // gpt_train's own (bench/zeropp, the other user of TrainFlags, reports no MFU).
  std::string peak_tflops;
  flags.group("MFU");
  flags.add_string("--peak-tflops", &peak_tflops,
                   "dense peak TFLOP/s of what one rank computes on, MFU's denominator (default: the CPU "
                   "cores' FMA peak or the GPU's datasheet figure, named in the banner)");
  if (!flags.parse(argc, argv)) return false;
  train.finish(world_size);
  if (!peak_tflops.empty()) options->peak_tflops = parse_peak_tflops(peak_tflops);
  return true;
}

}  // namespace gpt
