// CudaOps' block quantizers: qwZ's int8 weights, qgZ's int4/int8 gradients with LoCo's error feedback, and
// their inverses (see cuda_ops.h and kernels/quant/quantize_block.h).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/ops_internal.h"

namespace gpt::cuda {

bool CudaOps::quantize(const Tensor&, const Tensor&, int64_t, int64_t, int, int) {
  not_yet("quantize");
}

bool CudaOps::quantize_with_feedback(const Tensor&, const Tensor&, const Tensor&, int64_t, int64_t, int, int,
                                     float) {
  not_yet("quantize_with_feedback");
}

void CudaOps::dequantize(const Tensor&, const Tensor&, int64_t, int64_t, int, int, DType) {
  not_yet("dequantize");
}

void CudaOps::dequantize_add(const Tensor&, const Tensor&, int64_t, int64_t, int, int) {
  not_yet("dequantize_add");
}

}  // namespace gpt::cuda
