// The dtype that compute weights and gradients take on the wire for a precision (fp32, fp16, bf16). The
// conversions themselves are the backend's cast (kernels/ops.h).
#pragma once

#include <cstddef>

#include "tensor/tensor.h"
#include "zero/config.h"

namespace gpt {

DType wire_dtype(Precision precision);
size_t wire_bytes(Precision precision);  // bytes per element

}  // namespace gpt
