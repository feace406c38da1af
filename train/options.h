// gpt_train's settings: Megatron-style flags merged with the DeepSpeed JSON config (a flag given on the
// command line wins over the JSON key, and the start-up banner says so), then checked as a whole.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/flags.h"
#include "model/config.h"
#include "model/pipeline.h"
#include "train/lr_schedule.h"
#include "zero/config.h"

namespace gpt {

// gpt_train --plan: the cluster to plan for (nothing is trained and no model memory is allocated).
struct PlanOptions {
  bool enabled = false;
  int nodes = 1;
  int gpus_per_node = 1;
  double gpu_memory_bytes = 32e9;          // --gpu-memory 32GB
  double intra_node_bytes_per_s = 150e9;   // --intra-node-bandwidth 150GB/s
  double inter_node_bytes_per_s = 12.5e9;  // --inter-node-bandwidth 100Gb/s
  double gpu_tflops = 125;                 // --gpu-tflops: achievable dense fp16 TFLOP/s per GPU
  // --nvme-read-bandwidth, --nvme-write-bandwidth: one node's swap disk, shared by its GPUs. Reads and
  // writes differ; the defaults are this machine's disk (dd, O_DIRECT, 1 MiB blocks, one stream).
  double nvme_read_bytes_per_s = 1.3e9;
  double nvme_write_bytes_per_s = 2.9e9;
  // Host work per rank, for a cluster whose communication and codecs run on the cores that compute (the CPU
  // backend: MPI over TCP, quantizers and casts on the compute thread); 0: not counted, as on GPUs, where
  // NCCL and the codec kernels take a small share. bench/calibrate measures them with every rank busy.
  double host_comm_bytes_per_s = 0;      // --host-comm-bandwidth: bytes a rank sends per second of its CPU
  double decode_elements_per_s = 0;      // --decode-rate: fp16/bf16 wire elements to compute weights
  double dequantize_elements_per_s = 0;  // --dequantize-rate: int8/int4 block elements to fp32
  double quantize_elements_per_s = 0;    // --quantize-rate: fp32 elements to int8/int4 blocks
  double reduce_elements_per_s = 0;      // --reduce-rate: wire elements summed into a reduction
  double optimizer_elements_per_s = 0;   // --optimizer-rate: AdamW on the shard, with its compute copy
  double buffer_bytes_per_s = 0;         // --buffer-fill-bandwidth: zero-filled buffers allocated and freed
  double link_latency_s = 0;             // --link-latency-us: per message step of a collective
};

struct TrainOptions {
  GPTConfig model;
  ZeroConfig zero;  // zero.recompute: --recompute-granularity/-method/-num-layers, --checkpoint-activations

  // --tensor-model-parallel-size: ranks of one tensor-parallel group (consecutive ranks, inside one node).
  int tensor_parallel = 1;
  // --sequence-parallel is zero.sequence_parallel: LayerNorm and dropout on 1/t of the sequence. Needs t > 1;
  // at t = 1 it is turned off with a note, as Megatron does, so that the arithmetic stays that of t = 1.
  // --distribute-saved-activations (or activation_checkpointing.partition_activations at t > 1) is
  // zero.distribute_saved_activations: each rank of a tensor-parallel group keeps 1/t of every checkpointed
  // block input and all-gathers it for the recomputation (ZeRO-R's partitioned activation checkpoints). Needs
  // t > 1, full recomputation and no sequence parallelism (Megatron's rules).

  // --pipeline-model-parallel-size and Megatron's uneven-split and virtual-stage flags (model/pipeline.h).
  // The layout and its schedule are checked; the training loop and the planner run p = 1 only so far.
  PipelineLayout pipeline;

  int micro_batch = 4;  // sequences per rank per micro-step
  int accumulation_steps = 1;
  int64_t global_batch = 0;  // micro_batch x accumulation_steps x data-parallel size (world size / (t p))
  int train_iters = 20;
  LrSchedule schedule;  // from --lr, --min-lr, --lr-decay-style... or the JSON scheduler
  int64_t seed = 1234;

  std::string data_path;
  std::string valid_data_path;     // without it, --split carves validation windows out of the training data
  std::string split = "969,30,1";  // train, validation, test weights (Megatron's)
  double split_train = 1.0, split_valid = 0.0;  // --split as fractions of the windows (train first, in order)
  std::string vocab_file, merge_file;
  std::string deepspeed_config;
  int ranks_per_node = 0;     // 0: detect real nodes
  double comm_timeout = 600;  // --comm-timeout seconds without progress before the job is aborted; 0 = never
  int threads = 0;            // 0: all cores
  // --peak-tflops: the dense peak TFLOP/s of what one rank computes on, MFU's denominator; 0: the device's
  // stated peak (train/peak_flops.h).
  double peak_tflops = 0;
  std::string device = "cpu";  // --device cpu|cuda: the backend that holds and computes the model's state
  // --memory-limit: the machine's memory this job may use, shared by its ranks on the machine (the memory
  // guard, train/memory_guard.h); 0: MemAvailable from /proc/meminfo.
  double memory_limit_bytes = 0;

  int log_interval = 1;      // a progress line every N steps (DeepSpeed's steps_per_print)
  int eval_interval = 1000;  // validation loss every N steps (and at the end), Megatron's default
  int eval_iters = 100;      // validation batches per evaluation
  bool wall_clock_breakdown = false;
  std::string metrics_file;

  std::string save, load, init_from;
  int save_interval = 0;             // a checkpoint every N steps (0: only at the end and on a stop)
  int keep_checkpoints = 0;          // 0: keep all
  int exit_interval = 0;             // stop (after a checkpoint) when the iteration is a multiple of N
  double exit_duration_in_mins = 0;  // stop (after a checkpoint) after the first step starting this late
  bool finetune = false;             // --load only the weights: step, optimizer state and data position fresh

  PlanOptions plan;
  std::vector<std::string> notes;  // banner lines: where settings came from, accepted keys without effect
};

// Parses argv and the JSON file it names, for a world of world_size ranks. Throws UsageError with one line.
// Returns false when --help was printed.
bool parse_train_options(int argc, const char* const* argv, int world_size, TrainOptions* options);

// gpt_train's flags on a parser that may carry more (bench/zeropp adds its own), in two steps:
//   FlagParser flags(...);  TrainFlags train(flags, &options);  ...more flags...
//   if (!flags.parse(argc, argv)) return 0;  train.finish(world_size);
class TrainFlags {
 public:
  // Registers every gpt_train flag, by group, writing into *options (whose values are the defaults).
  TrainFlags(FlagParser& flags, TrainOptions* options);
  TrainFlags(const TrainFlags&) = delete;
  TrainFlags& operator=(const TrainFlags&) = delete;

  // After flags.parse(): merges the DeepSpeed JSON (a flag given wins), resolves the batch sizes and checks
  // the whole for a world of world_size ranks. Throws UsageError with one line.
  void finish(int world_size);

  // The flags merged with JSON keys or converted after parsing; the rest go straight into TrainOptions.
  struct Values {
    int micro = 4, stage = 0, tensor_parallel = 1, timeout_minutes = 0, tile_factor = 1;
    int64_t global = 0, warmup = 0, decay_iters = 0;
    double lr = 6e-4, min_lr = 0, clip = 1.0, weight_decay = 0.01, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
    std::string decay_style = "constant", gpu_memory = "32GB", intra_bw = "150GB/s", inter_bw = "100Gb/s";
    std::string memory_limit, nvme_read_bw = "1.3GB/s", nvme_write_bw = "2.9GB/s", host_comm_bw, buffer_bw;
    bool fp16 = false, bf16 = false, checkpoint = false, deepspeed = false, ds_checkpointing = false;
    // Activation recomputation and its tensor-parallel companions, resolved together (options.cc).
    std::string recompute_granularity, recompute_method;  // empty: not given
    int recompute_num_layers = 1;
    bool recompute_activations = false, distribute_saved_activations = false, sequence_parallel = false;
    bool flash_attention = false;  // Megatron's --use-flash-attn
  };

 private:
  FlagParser& flags_;
  TrainOptions& o_;
  Values v_;
};

}  // namespace gpt
