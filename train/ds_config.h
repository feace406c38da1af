// The DeepSpeed-style JSON config (--deepspeed_config FILE): the keys we read, with DeepSpeed's names and
// defaults. Each value is optional here, so the trainer can tell a key that was given from a default and let
// a command-line flag win over it. Unknown keys are collected as warnings naming the key path; a value of the
// wrong type or range is an error naming the key path and the expected form.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gpt {

struct DeepSpeedConfig {
  std::string path;  // the file it came from, for messages

  // Batch: any two of the three determine the third (batch = micro x accumulation x world).
  std::optional<int64_t> train_batch_size;
  std::optional<int64_t> train_micro_batch_size_per_gpu;
  std::optional<int64_t> gradient_accumulation_steps;

  // fp16{enabled, loss_scale (0 = dynamic), initial_scale_power, loss_scale_window, hysteresis,
  // min_loss_scale}
  std::optional<bool> fp16_enabled;
  std::optional<double> loss_scale;
  std::optional<int64_t> initial_scale_power;
  std::optional<int64_t> loss_scale_window;
  std::optional<int64_t> hysteresis;
  std::optional<double> min_loss_scale;
  std::optional<bool> bf16_enabled;  // "bf16" or the legacy "bfloat16"

  std::optional<double> gradient_clipping;

  // zero_optimization
  std::optional<int64_t> zero_stage;
  std::optional<int64_t> reduce_bucket_size;
  std::optional<bool> overlap_comm;
  // ZeRO++
  std::optional<bool> zero_quantized_weights;
  std::optional<bool> zero_hierarchical_allgather;
  std::optional<bool> stage3_gather_once_per_step;  // ours
  std::optional<int64_t> zero_hpz_partition_size;
  std::optional<bool> zero_quantized_gradients;
  std::optional<int64_t> zeropp_weight_block_size;
  std::optional<int64_t> zeropp_gradient_block_size;
  std::optional<int64_t> zeropp_intra_node_gradient_bits;  // ours: qgZ's intra-node hop, 4 or 8
  // zeropp_loco_param{err_beta, reset_T}: present (an object) turns LoCo's error feedback on; null is off.
  bool zeropp_loco = false;
  std::optional<double> loco_err_beta;
  std::optional<int64_t> loco_reset_T;

  // ZeRO-Infinity: zero_optimization.offload_optimizer{device, nvme_path, pin_memory, buffer_count,
  // fast_init, pipeline_read, pipeline_write, ratio}, .offload_param{device, nvme_path, pin_memory,
  // buffer_count, buffer_size, max_in_cpu}, .sub_group_size, and aio{block_size, queue_depth, thread_count
  // (or intra_op_parallelism), single_submit, overlap_events, use_gds}.
  std::optional<std::string> offload_optimizer_device, offload_optimizer_nvme_path;
  std::optional<bool> offload_optimizer_pin_memory, offload_optimizer_fast_init,
      offload_optimizer_pipeline_read, offload_optimizer_pipeline_write;
  std::optional<int64_t> offload_optimizer_buffer_count;
  std::optional<double> offload_optimizer_ratio;
  std::optional<std::string> offload_param_device, offload_param_nvme_path;
  std::optional<bool> offload_param_pin_memory;
  std::optional<int64_t> offload_param_buffer_count, offload_param_buffer_size, offload_param_max_in_cpu;
  std::optional<int64_t> sub_group_size;
  // zero_optimization.memory_centric_tiling_factor: ours (DeepSpeed offers tiling as the TiledLinear API,
  // not a key): each block matrix in this many tiles of output rows; 1 is off.
  std::optional<int64_t> memory_centric_tiling_factor;
  std::optional<int64_t> aio_block_size, aio_queue_depth, aio_thread_count;
  std::optional<bool> aio_single_submit, aio_overlap_events, aio_use_gds;
  // optimizer{type: Adam | AdamW, params{lr, betas, eps, weight_decay, adam_w_mode}}
  std::optional<std::string> optimizer_type;
  std::optional<double> optimizer_lr, optimizer_beta1, optimizer_beta2, optimizer_eps, optimizer_weight_decay;
  std::optional<bool> adam_w_mode;
  // scheduler{type: WarmupLR | WarmupDecayLR | WarmupCosineLR, params{...}} (DeepSpeed's parameter names)
  std::optional<std::string> scheduler_type;
  std::optional<double> warmup_min_lr, warmup_max_lr, warmup_min_ratio, cos_min_ratio;
  std::optional<int64_t> warmup_num_steps, total_num_steps;
  std::optional<std::string> warmup_type;

  // activation_checkpointing{partition_activations, contiguous_memory_optimization, number_checkpoints (an
  // integer >= 1, or null: unset), cpu_checkpointing, synchronize_checkpoint_boundary, profile}: how
  // checkpointing works. It is turned on by --checkpoint-activations or --recompute-granularity, as in
  // Megatron-DeepSpeed; train/options.cc says what each key does here.
  std::optional<bool> partition_activations, contiguous_memory_optimization, cpu_checkpointing,
      synchronize_checkpoint_boundary, checkpointing_profile;
  std::optional<int64_t> number_checkpoints;

  std::optional<int64_t> steps_per_print;
  std::optional<bool> wall_clock_breakdown;
  // Accepted, reported at start-up with what they do here (see train/options.cc).
  std::optional<bool> reduce_scatter, contiguous_gradients;
  std::optional<double> stage3_prefetch_bucket_size, stage3_param_persistence_threshold,
      stage3_max_live_parameters;

  std::vector<std::string> warnings;  // "unknown key zero_optimization.foo (ignored)"
};

// Reads and checks FILE; throws UsageError (base/user_error.h) with one line naming the file, the key path
// and the expected form.
DeepSpeedConfig read_deepspeed_config(const std::string& path);
// The same from a JSON text (tests); `path` only labels messages.
DeepSpeedConfig parse_deepspeed_config(const std::string& json_text, const std::string& path);

}  // namespace gpt
