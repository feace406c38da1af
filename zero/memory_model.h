// The ZeRO memory formulas: the model state one rank holds for a stage (with hpZ's secondary copy), as the
// papers write it ("4P/W") and in bytes, from the partition. The engine prints them beside what its arenas
// measured; the planner reports them for clusters it does not run. One function, so the two never disagree.
#pragma once

#include <string>
#include <vector>

#include "zero/config.h"
#include "zero/partition.h"

namespace gpt {

struct StateFormula {
  std::string
      state;  // "compute weights", "master", "moments", "gradients", "hpZ secondary", "qgZ error feedback"
  std::string formula;  // "2P/W", "4P", "(1+4/B)P/h", ...
  double bytes = 0;     // per rank
  // Where it lives: "device" (GPU memory; RAM on the CPU backend), "cpu" (host memory beside a GPU: pinned
  // swap buffers; RAM on the CPU backend too) or "nvme" (the swap files of ZeRO-Infinity).
  std::string tier = "device";
};

// The line of ZeRO-Infinity's swap buffers, named as the engine's arena category.
inline constexpr const char* kSwapBuffersState = "swap buffers";

// P is the padded parameter count, W the world size, h the hpZ group size, B the qwZ block (qgZ's block for
// LoCo's kept errors, which exist with qgZ on two or more nodes), L the ranks per node.
std::vector<StateFormula> zero_state_formulas(const Partition& partition, const ZeroConfig& config,
                                              int nodes);

}  // namespace gpt
