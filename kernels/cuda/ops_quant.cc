// CudaOps' block quantizers: qwZ's int8 weights, qgZ's int4/int8 gradients with LoCo's error feedback, and
// their inverses (see cuda_ops.h and kernels/quant/quantize_block.h). The arguments are checked as the CPU's
// bulk functions check them (the same exception type, so a bad call fails alike on both backends), plus the
// tensors' sizes, which the device could not check; then kernels/cuda/quantize.h does the work.
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/ops_internal.h"
#include "kernels/cuda/quantize.h"
#include "kernels/quant/quantize.h"

namespace gpt::cuda {
namespace {

void check_arguments(const char* op, int64_t slice_len, int64_t count, int bits, int block) {
  std::string problem;
  if (bits != 4 && bits != 8) problem = "bits is " + std::to_string(bits) + "; it must be 4 or 8";
  if (!quant::valid_block_size(block))
    problem = "block size is " + std::to_string(block) + "; it must be a positive multiple of 8";
  if (slice_len < 0 || count < 0)
    problem = "negative length (" + std::to_string(slice_len) + " x " + std::to_string(count) + ")";
  if (!problem.empty()) throw std::invalid_argument(std::string("CudaOps::") + op + ": " + problem);
}

void check_dtype(const char* op, const char* what, DType dtype) {
  if (dtype != DType::kF32 && dtype != DType::kF16 && dtype != DType::kBF16) {
    throw std::invalid_argument(std::string("CudaOps::") + op + ": cannot " + what + " dtype " +
                                dtype_name(dtype) + "; pass f32, f16 or bf16");
  }
}

// A tensor smaller than the layout says would be read or written out of bounds on the device.
void check_bytes(const char* op, const char* role, const Tensor& t, size_t needed) {
  if (t.nbytes() < needed) {
    throw CudaError(std::string("CudaOps::") + op + ": " + role + " " + t.describe() + " holds " +
                    std::to_string(t.nbytes()) + " bytes, the layout needs " + std::to_string(needed));
  }
}

// Bytes of `count` quantized slices back to back.
size_t wire_bytes(int64_t slice_len, int64_t count, int bits, int block) {
  return static_cast<size_t>(count) * quant::quantized_bytes(slice_len, bits, block);
}

// The "some block was not finite" flag the kernels set, in stream-ordered device memory. read() waits for the
// stream: a value returned to the host has to.
class NonFiniteFlag {
 public:
  explicit NonFiniteFlag(const Context& ctx) : ctx_(ctx), flag_(ctx, sizeof(uint32_t)) {
    GPT_CUDA_CHECK(cudaMemsetAsync(get(), 0, sizeof(uint32_t), ctx_.stream()));
  }

  uint32_t* get() const { return flag_.as<uint32_t>(); }
  bool raised() const { return read_back(ctx_, get()) != 0; }

 private:
  const Context& ctx_;
  StreamScratch flag_;
};

}  // namespace

bool CudaOps::quantize(const Tensor& out, const Tensor& x, int64_t slice_len, int64_t count, int bits,
                       int block) {
  check_arguments("quantize", slice_len, count, bits, block);
  check_dtype("quantize", "quantize", x.dtype);
  check_bytes("quantize", "x", x, dtype_bytes(x.dtype, slice_len * count));
  check_bytes("quantize", "out", out, wire_bytes(slice_len, count, bits, block));
  if (slice_len * count == 0) return true;
  const NonFiniteFlag nonfinite(context_);
  quantize_blocks(context_, x.data, x.dtype, slice_len, count, bits, block, static_cast<uint8_t*>(out.data),
                  nonfinite.get());
  return !nonfinite.raised();
}

bool CudaOps::quantize_with_feedback(const Tensor& out, const Tensor& x, const Tensor& error,
                                     int64_t slice_len, int64_t count, int bits, int block, float beta) {
  check_arguments("quantize_with_feedback", slice_len, count, bits, block);
  if (!(beta >= 0.0f && beta < 1.0f)) {
    throw std::invalid_argument("CudaOps::quantize_with_feedback: beta is " + std::to_string(beta) +
                                "; it must be in [0, 1)");
  }
  const float* values = f32(x, "quantize_with_feedback");
  check_bytes("quantize_with_feedback", "x", x, dtype_bytes(DType::kF32, slice_len * count));
  check_bytes("quantize_with_feedback", "error", error, wire_bytes(slice_len, count, 8, block));
  check_bytes("quantize_with_feedback", "out", out, wire_bytes(slice_len, count, bits, block));
  if (slice_len * count == 0) return true;
  const NonFiniteFlag nonfinite(context_);
  const float one_minus_beta = 1.0f - beta;  // rounded once, as the CPU does
  quantize_blocks_with_feedback(context_, values, slice_len, count, bits, block, beta, one_minus_beta,
                                static_cast<uint8_t*>(error.data), static_cast<uint8_t*>(out.data),
                                nonfinite.get());
  return !nonfinite.raised();
}

void CudaOps::dequantize(const Tensor& out, const Tensor& in, int64_t slice_len, int64_t count, int bits,
                         int block, DType round_to) {
  check_arguments("dequantize", slice_len, count, bits, block);
  check_dtype("dequantize", "round to", round_to);
  const int64_t n = slice_len * count;
  check_bytes("dequantize", "in", in, wire_bytes(slice_len, count, bits, block));
  if (out.dtype == DType::kF32) {
    check_bytes("dequantize", "out", out, dtype_bytes(DType::kF32, n));
    dequantize_blocks(context_, static_cast<const uint8_t*>(in.data), slice_len, count, bits, block,
                      f32(out, "dequantize"), round_to);
    return;
  }
  // Into round_to itself (the half layer loop's weights): through fp32 scratch, then narrowed, exactly (the
  // values are already rounded to it).
  if (out.dtype != round_to || (out.dtype != DType::kF16 && out.dtype != DType::kBF16))
    throw UnsupportedOp("CudaOps::dequantize: into " + out.describe() + " rounded through " +
                        dtype_name(round_to) + " (want fp32 or that dtype)");
  check_bytes("dequantize", "out", out, dtype_bytes(out.dtype, n));
  StreamScratch values(context_, size_t(n) * sizeof(float));
  dequantize_blocks(context_, static_cast<const uint8_t*>(in.data), slice_len, count, bits, block,
                    values.as<float>(), round_to);
  if (out.dtype == DType::kF16) {
    f32_to_f16_scaled(context_, bits16(out), values.as<float>(), 1.0f, n);
  } else {
    f32_to_bf16_scaled(context_, bits16(out), values.as<float>(), 1.0f, n);
  }
}

void CudaOps::dequantize_add(const Tensor& acc, const Tensor& in, int64_t slice_len, int64_t count, int bits,
                             int block) {
  check_arguments("dequantize_add", slice_len, count, bits, block);
  float* sums = f32(acc, "dequantize_add");
  check_bytes("dequantize_add", "acc", acc, dtype_bytes(DType::kF32, slice_len * count));
  check_bytes("dequantize_add", "in", in, wire_bytes(slice_len, count, bits, block));
  dequantize_add_blocks(context_, static_cast<const uint8_t*>(in.data), slice_len, count, bits, block, sums);
}

}  // namespace gpt::cuda
