// Thread count of the CPU kernels: OpenMP loops and Eigen's GEMM (which parallelizes through OpenMP) share
// it.
#pragma once

namespace gpt::cpu {

// Sets the number of threads used by every CPU kernel from now on (OpenMP and Eigen). n >= 1.
void set_num_threads(int n);

// The number of threads CPU kernels will use.
int num_threads();

}  // namespace gpt::cpu
