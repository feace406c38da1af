// The engine's settings, as plain values: the trainer fills them from flags and the DeepSpeed JSON.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "model/config.h"
#include "model/recompute.h"
#include "offload/swapper.h"
#include "tensor/tensor.h"
#include "zero/loss_scaler.h"

namespace gpt::comm {
struct Topology;
}

namespace gpt {

struct ZeroConfig;

// The compute precision (ZeroConfig::precision) is the dtype of compute weights and of gradients on the wire:
// DType::kF32 (the default, as in Megatron, and every comparison exact), kF16 (with dynamic loss scaling) or
// kBF16 (without); the double-precision gradient checks use kF64 with an fp64 layer loop. precision_name
// spells it as flags, banners and checkpoint manifests do: "fp32", "fp16", "bf16" (and "fp64").
const char* precision_name(DType precision);

// Bits per value on the wire: qwZ's weights and qgZ's gradients (the cross-node hop; the intra-node hop has
// its own setting, 4 by default). LoCo keeps its errors in int8 blocks.
inline constexpr int kQuantizedWeightBits = 8;
inline constexpr int kQuantizedGradientBits = 4;
inline constexpr int kFeedbackBits = 8;

// ZeRO-Infinity's offload tiers, with DeepSpeed's keys (zero_optimization.offload_optimizer, .offload_param,
// the "aio" section, .sub_group_size) and defaults, except sub_group_size (see kDefaultSubGroupSize).
// "cpu" keeps the state in host memory: on the CPU backend that is where it already is, and the banner says
// so; "nvme" puts it in swap files under nvme_path/<run id>/rank<r>/.
enum class OffloadDevice { kNone, kCpu, kNvme };
const char* offload_device_name(OffloadDevice device);  // "none", "cpu", "nvme"

// Elements of this rank's optimizer shard updated per swap-in. DeepSpeed's default of 1e9 would make each of
// the buffer_count buffers 12 GB (fp32 master + two moments); 25M makes each 300 MB, so DeepSpeed's four
// buffers hold 1.2 GB, a twentieth of this 24 GiB machine, and a sub-group still reads in ~0.2 s at 1.3 GB/s.
inline constexpr int64_t kDefaultSubGroupSize = 25'000'000;

struct OffloadConfig {
  OffloadDevice optimizer = OffloadDevice::kNone;      // offload_optimizer.device
  std::string optimizer_nvme_path;                     // offload_optimizer.nvme_path
  bool pin_memory = false;                             // offload_optimizer.pin_memory (CUDA: pinned buffers)
  int optimizer_buffer_count = 4;                      // offload_optimizer.buffer_count: sub-groups in memory
  bool fast_init = false;                              // offload_optimizer.fast_init
  bool pipeline_read = false, pipeline_write = false;  // offload_optimizer.pipeline_{read,write}
  double ratio = 1.0;                                  // offload_optimizer.ratio
  OffloadDevice param = OffloadDevice::kNone;          // offload_param.device (stage 3 only)
  std::string param_nvme_path;                         // offload_param.nvme_path
  int param_buffer_count = 5;                          // offload_param.buffer_count
  int64_t param_buffer_size = 100'000'000;             // offload_param.buffer_size (elements)
  int64_t max_in_cpu = 1'000'000'000;                  // offload_param.max_in_cpu (elements)
  offload::AioConfig aio;                              // the "aio" section
  int64_t sub_group_size = kDefaultSubGroupSize;       // zero_optimization.sub_group_size
  std::string run_id = "run";                          // the swap folders are nvme_path/<run_id>/rank<r>/

  bool optimizer_on_nvme() const { return optimizer == OffloadDevice::kNvme; }
  bool param_on_nvme() const { return param == OffloadDevice::kNvme; }
  // The engine's swap buffers (zero/offload_store.h) live in wire memory, and the disk reads and writes them
  // from the host: wire memory must stay host memory (train/device_world.h).
  bool swaps_through_wire() const { return optimizer_on_nvme() || param_on_nvme(); }

  // ZeRO-Infinity's rules against the owning ZeRO settings (stage, precision, tile factor) and the model's
  // partition at this data-parallel size (the tensor-parallel slice's partition at t > 1).
  Problems problems(const ZeroConfig& owner, const GPTConfig& model, int data_parallel_size,
                    int tensor_parallel_size = 1) const;
};

struct ZeroConfig {
  int stage = 0;  // 0: data parallel, 1: +optimizer states, 2: +gradients, 3: +weights
  int64_t reduce_bucket_size = 500'000'000;  // elements per gradient bucket (DeepSpeed's default 5e8)
  bool overlap_comm = false;  // prefetch the next gather, reduce buckets while backward goes on
  DType precision = DType::kF32;
  LossScalerConfig loss_scaler;  // used with fp16
  double gradient_clipping = 0;  // global L2 norm; 0 = off
  AdamWHyper adam;               // lr is set per step by the schedule
  // Activation recomputation (--recompute-granularity/-method/-num-layers, --checkpoint-activations; the
  // model's recompute.h).
  Recompute recompute;
  // Memory-centric tiling (zero_optimization.memory_centric_tiling_factor, --tile-factor): each block matrix
  // is this many gather units of output rows (model/params.h); 1 is off.
  int tile_factor = 1;
  // Megatron's sequence parallelism (--sequence-parallel) over the engine's tensor-parallel group
  // (model/tensor_parallel.h); meaningless without one.
  bool sequence_parallel = false;
  // Megatron's --distribute-saved-activations (ZeRO-R's partitioned activation checkpoints): with full
  // recomputation, each tensor-parallel rank keeps 1/t of every checkpointed block input.
  bool distribute_saved_activations = false;
  double hidden_dropout = 0;     // Megatron's --hidden-dropout (embedding and residual branches)
  double attention_dropout = 0;  // Megatron's --attention-dropout (attention probabilities)
  bool record_events = false;    // keep an event log of posts and computes (tests)

  // ZeRO++ (stage 3 only), with DeepSpeed's key names.
  bool quantized_weights = false;  // zero_quantized_weights (qwZ): int8 blocks on every weight gather
  int hpz_partition_size = 1;      // zero_hpz_partition_size (hpZ): a node-local secondary copy over h ranks
  bool quantized_gradients = false;  // zero_quantized_gradients (qgZ): int4 hierarchical all-to-all reduction
  // zero_hierarchical_allgather (ours): a primary weight gather on two or more nodes crosses nodes once per
  // shard (a gather among the ranks with this rank's local index, then one inside the node) instead of
  // riding the flat ring, whose node boundaries each carry W-1 shards. The same bytes arrive: bit for bit.
  bool hierarchical_allgather = false;
  // stage3_gather_once_per_step (ours): each unit is gathered once per optimizer step, by its first forward,
  // and its full weights are kept until the step's update, so the step's later micro-batches (gradient
  // accumulation, a pipeline stage's micro-batches) and every backward use them instead of gathering again:
  // one gather per step instead of two per micro-batch, for the memory of the whole (stage's) model in the
  // loop dtype. The same weights arrive as a re-gather would bring (with qwZ: the same dequantized bytes
  // hpZ's secondary rebuilds), so losses are bit for bit those without it.
  bool gather_once_per_step = false;
  int weight_block = 2048;   // zeropp_weight_block_size: elements per qwZ scale
  int gradient_block = 512;  // zeropp_gradient_block_size: elements per qgZ scale
  int intra_node_gradient_bits = kQuantizedGradientBits;  // zeropp_intra_node_gradient_bits: qgZ's first hop
  // zeropp_loco_param (LoCo error feedback for qgZ's two hops; zero/qgz.h has the recurrence).
  bool loco = false;
  double loco_err_beta = 0.8;   // err_beta: the weight of the kept error in its moving average
  int64_t loco_reset_T = 1024;  // reset_T: the kept errors are zeroed every reset_T applied steps

  OffloadConfig offload;  // ZeRO-Infinity

  // The stage and ZeRO++'s rules against the data-parallel topology (hpZ's h must divide its ranks per
  // node). The offload rules are offload.problems(), the tensor-parallel ones ParallelLayout::problems()
  // (model/params.h).
  Problems problems(const comm::Topology& data_parallel) const;
};

}  // namespace gpt
