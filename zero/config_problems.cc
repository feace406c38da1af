// The rules on the engine's settings (zero/config.h), each written once: ZeroConfig::problems (the stage and
// ZeRO++) and OffloadConfig::problems (ZeRO-Infinity); the tensor-parallel layout's are
// ParallelLayout::problems (model/params.h). The engine throws the first problem; gpt_train's options and
// main and the planner report it.
#include <sstream>
#include <utility>

#include "comm/communicator.h"
#include "model/config.h"
#include "model/params.h"
#include "zero/config.h"
#include "zero/partition.h"

namespace gpt {
namespace {

// qgZ's own options: LoCo's error feedback and the intra-node hop's bits.
void add_qgz_problems(const ZeroConfig& config, Problems& found) {
  if (config.loco && !config.quantized_gradients) {
    found.push_back(
        "zeropp_loco_param is error feedback for qgZ, but zero_quantized_gradients is off; set "
        "zero_quantized_gradients to true or remove zeropp_loco_param");
  }
  if (!(config.loco_err_beta >= 0 && config.loco_err_beta < 1)) {
    std::ostringstream beta;
    beta << config.loco_err_beta;
    found.push_back("zeropp_loco_param.err_beta is " + beta.str() +
                    "; it must be in [0, 1) (LoCo's default is 0.8)");
  }
  if (config.loco_reset_T < 1) {
    found.push_back("zeropp_loco_param.reset_T is " + std::to_string(config.loco_reset_T) +
                    "; it must be at least 1 (the default is 1024 steps)");
  }
  const int bits = config.intra_node_gradient_bits;
  if (bits != 4 && bits != 8) {
    found.push_back("zeropp_intra_node_gradient_bits is " + std::to_string(bits) +
                    "; it must be 4 or 8 (default 4)");
  }
}

// The offload_param buffers must hold this rank's shard of every unit (one unit's shard at a time).
void add_param_buffer_problems(const OffloadConfig& f, const ZeroConfig& owner, const GPTConfig& model,
                               int world_size, int tensor_parallel_size, Problems& found) {
  // The partition exists only for a model the layout rules accept; those report their own problems.
  if (!model.validate().empty() || !tile_factor_problem(model, owner.tile_factor).empty() ||
      !tensor_slice_problem(model, tensor_parallel_size).empty() ||
      !tiled_slice_problem(owner.tile_factor, tensor_parallel_size).empty()) {
    return;
  }
  // Every tensor-parallel rank's slice has the same shard sizes: rank 0's stands for all.
  const ParamTable table = make_param_table(model, owner.tile_factor, TensorSlice{tensor_parallel_size, 0});
  const Partition partition(table, world_size, world_size);
  for (int u = 0; u < int(partition.units().size()); ++u) {
    if (partition.unit(u).shard > f.param_buffer_size) {
      found.push_back("zero_optimization.offload_param.buffer_size is " +
                      std::to_string(f.param_buffer_size) + " elements, but this rank's shard of " +
                      table.units[u].name + " has " + std::to_string(partition.unit(u).shard) + " at " +
                      std::to_string(world_size) + " ranks; set buffer_size to at least that");
      return;  // the largest shard's size is the fix; one line says it
    }
  }
}

}  // namespace

Problems ZeroConfig::problems(const comm::Topology& data_parallel) const {
  Problems found;
  if (stage < 0 || stage > 3) found.push_back("ZeRO stage must be 0, 1, 2 or 3");
  const bool any = quantized_weights || quantized_gradients || hpz_partition_size > 1;
  if (any && stage != 3) {
    found.push_back(
        "ZeRO++ (zero_quantized_weights, zero_hpz_partition_size, zero_quantized_gradients) needs ZeRO "
        "stage 3, but the stage is " +
        std::to_string(stage) + "; set zero_optimization.stage to 3");
  }
  if (gather_once_per_step && stage != 3) {
    found.push_back(
        "stage3_gather_once_per_step keeps stage 3's gathered weights for the step, but the stage is " +
        std::to_string(stage) + "; set zero_optimization.stage to 3 or remove the key");
  }
  if (hierarchical_allgather && stage != 3) {
    found.push_back("zero_hierarchical_allgather routes stage 3's weight gathers, but the stage is " +
                    std::to_string(stage) + "; set zero_optimization.stage to 3 or remove the key");
  }
  const int h = hpz_partition_size, L = data_parallel.ranks_per_node;
  if (h < 1 || L % h != 0) {
    found.push_back("zero_hpz_partition_size " + std::to_string(h) + " does not divide the " +
                    std::to_string(L) +
                    " ranks per node; choose a divisor of the ranks per node (1 turns hpZ off)");
  }
  add_qgz_problems(*this, found);
  for (auto [key, block] : {std::pair{"zeropp_weight_block_size", weight_block},
                            std::pair{"zeropp_gradient_block_size", gradient_block}}) {
    if (block <= 0 || block % 8 != 0) {
      found.push_back(std::string(key) + " is " + std::to_string(block) +
                      "; a quantization block must be a positive multiple of 8 (defaults 2048 and 512)");
    }
  }
  return found;
}

Problems OffloadConfig::problems(const ZeroConfig& owner, const GPTConfig& model, int data_parallel_size,
                                 int tensor_parallel_size) const {
  Problems found;
  const std::string stage = std::to_string(owner.stage);
  if (optimizer_on_nvme() && owner.stage != 3) {
    found.push_back(
        "zero_optimization.offload_optimizer.device \"nvme\" needs ZeRO stage 3 (as in DeepSpeed), but the "
        "stage is " +
        stage + "; set zero_optimization.stage to 3");
  }
  if (param != OffloadDevice::kNone && owner.stage != 3) {
    found.push_back(
        "zero_optimization.offload_param needs ZeRO stage 3 (weights are only partitioned there), but the "
        "stage is " +
        stage + "; set zero_optimization.stage to 3 or remove zero_optimization.offload_param");
  }
  if (!param_on_nvme()) return found;
  if (owner.precision == DType::kF64)
    found.push_back("offload_param \"nvme\" needs fp32, fp16 or bf16 compute weights");
  if (param_buffer_count < 2) {
    found.push_back("zero_optimization.offload_param.buffer_count is " + std::to_string(param_buffer_count) +
                    "; it must be at least 2 (one unit's shard is sent while the next one is read)");
  }
  add_param_buffer_problems(*this, owner, model, data_parallel_size, tensor_parallel_size, found);
  return found;
}

}  // namespace gpt
