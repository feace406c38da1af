// The ZeRO memory formulas; see memory_model.h.
#include "zero/memory_model.h"

#include "kernels/quant/quantize.h"
#include "model/loop.h"
#include "zero/offload_layout.h"
#include "zero/qgz.h"
#include "zero/reduce.h"

namespace gpt {

std::vector<StateFormula> zero_state_formulas(const Partition& p, const ZeroConfig& z, int nodes) {
  const double P = double(p.padded_total()), S = double(p.shard_total());  // S = P at stage 0
  const double cb = double(dtype_size(z.precision));
  const std::string c = cb == 2 ? "2" : "4";
  std::vector<StateFormula> lines;
  auto tier = [](OffloadDevice device) {
    return device == OffloadDevice::kNvme ? "nvme" : device == OffloadDevice::kCpu ? "cpu" : "device";
  };
  const char* param_tier = tier(z.offload.param);
  const char* optimizer_tier = tier(z.offload.optimizer);
  lines.push_back(
      {"compute weights", z.stage == 3 ? c + "P/W" : c + "P", z.stage == 3 ? cb * S : cb * P, param_tier});
  lines.push_back({"master", z.stage >= 1 ? "4P/W" : "4P", 4 * S, optimizer_tier});
  lines.push_back({"moments", z.stage >= 1 ? "8P/W" : "8P", 8 * S, optimizer_tier});
  lines.push_back({"gradients", z.stage >= 2 ? "4P/W" : "4P", z.stage >= 2 ? 4 * S : 4 * P});
  if (z.stage == 3 && z.hpz_partition_size > 1) {
    // Each rank keeps W/h shards of every unit as they arrived: compute dtype, or int8 blocks with scales.
    const int h = z.hpz_partition_size;
    double bytes = 0;
    for (const UnitPartition& u : p.units()) {
      const double shard = z.quantized_weights
                               ? double(quant::quantized_bytes(u.shard, kQuantizedWeightBits, z.weight_block))
                               : cb * double(u.shard);
      bytes += shard * double(p.world_size() / h);
    }
    lines.push_back({"hpZ secondary", z.quantized_weights ? "(1+4/B)P/h" : c + "P/h", bytes});
  }
  if (z.stage == 3 && z.quantized_gradients && z.loco && nodes >= 2) {
    // LoCo keeps an int8 error per value each hop quantizes: all W chunks of a bucket in hop 1, the N partial
    // sums in hop 2 (1/L of them).
    double bytes = 0;
    for (const std::vector<int>& bucket :
         plan_buckets(p, loop_schedule(int(p.units().size()), z.tile_factor, z.recompute).gradients,
                      z.reduce_bucket_size)) {
      int64_t chunk = 0;
      for (int u : bucket) chunk += p.unit(u).shard;
      bytes += double(qgz_intra_feedback_bytes(chunk, p.world_size(), z.gradient_block) +
                      qgz_cross_feedback_bytes(chunk, nodes, z.gradient_block));
    }
    lines.push_back({std::string(GradientReducer::kFeedbackCategory), "(1+4/B)(P+P/L)", bytes});
  }
  if (const OffloadLayout layout = make_offload_layout(p, z); layout.buffer_bytes() > 0) {
    lines.push_back(
        {kSwapBuffersState, "buffer_count x sub-group or unit", double(layout.buffer_bytes()), "cpu"});
  }
  return lines;
}

}  // namespace gpt
