// The optimizer state of ZeRO-Infinity's offload_optimizer "nvme": this rank's fp32 master weights and Adam
// moments live in the optimizer swap file, one record [master | m | v] per sub-group (offload_layout.h), and
// are walked sub-group by sub-group through offload_optimizer.buffer_count buffers. While sub-group i is
// visited (updated), the reads of the next ones and the write of the previous one are in flight:
//
//   buffers  lookahead  overlap
//   1        0          none: read i, visit i, write i, in turn
//   2        1          read i+1 with visit i
//   b >= 3   b - 2      reads of i+1 .. i+b-2 and the write of i-1 with visit i
//
// A buffer is reused for sub-group j only once the write of j - b has completed.
#pragma once

#include <functional>
#include <vector>

#include "zero/offload_store.h"

namespace gpt {

class SwappedOptimizer {
 public:
  // visit(group, master, m, v): the group's arrays (group.size() fp32 each) in a swap buffer (wire memory).
  using Visit = std::function<void(const SubGroup& group, float* master, float* m, float* v)>;
  enum class Mode {
    kUpdate,     // read, visit, write back
    kRead,       // read and visit (checkpoints, exports)
    kOverwrite,  // visit zeroed arrays, write them (initialization, checkpoint loads)
  };

  explicit SwappedOptimizer(OffloadStore& store);
  ~SwappedOptimizer();

  void for_each_group(Mode mode, const Visit& visit);

 private:
  OffloadStore& store_;
  std::vector<float*> buffers_;
};

}  // namespace gpt
