// Thread count of the CPU kernels: one setting for OpenMP loops and Eigen's OpenMP-parallel GEMM.
#include "kernels/cpu/threads.h"

#include <omp.h>

#include <Eigen/Core>
#include <algorithm>

namespace gpt::cpu {

void set_num_threads(int n) {
  n = std::max(n, 1);
  omp_set_num_threads(n);
  Eigen::setNbThreads(n);
}

int num_threads() {
  return omp_get_max_threads();
}

}  // namespace gpt::cpu
