// Wire dtypes; see wire.h.
#include "zero/wire.h"
namespace gpt {

DType wire_dtype(Precision precision) {
  switch (precision) {
    case Precision::kFp16:
      return DType::kF16;
    case Precision::kBf16:
      return DType::kBF16;
    case Precision::kFp32:
      break;
  }
  return DType::kF32;
}

size_t wire_bytes(Precision precision) {
  return dtype_size(wire_dtype(precision));
}

}  // namespace gpt
