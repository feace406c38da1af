// gpt_train's settings: Megatron-style flags merged with the DeepSpeed JSON config (a flag given on the
// command line wins over the JSON key, and the start-up banner says so), then checked as a whole.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
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
};

struct TrainOptions {
  GPTConfig model;
  ZeroConfig zero;

  int micro_batch = 4;  // sequences per rank per micro-step
  int accumulation_steps = 1;
  int64_t global_batch = 0;  // micro_batch x accumulation_steps x world size
  int train_iters = 20;
  double lr = 6e-4;
  int64_t seed = 1234;
  std::string data_path;
  std::string deepspeed_config;
  int ranks_per_node = 0;  // 0: detect real nodes
  int threads = 0;         // 0: all cores
  std::string metrics_file;
  PlanOptions plan;

  std::vector<std::string> notes;  // banner lines: where settings came from, accepted-but-ignored keys
};

// Parses argv and the JSON file it names, for a world of world_size ranks. Throws UsageError with one line.
// Returns false when --help was printed.
bool parse_train_options(int argc, const char* const* argv, int world_size, TrainOptions* options);

}  // namespace gpt
