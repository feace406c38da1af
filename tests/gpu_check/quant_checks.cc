// The ZeRO++ block quantizers, CudaOps against CpuOps byte for byte: quantize from fp32, fp16 and bf16 at
// int8 and int4 with qwZ's and qgZ's block sizes, qgZ's error feedback over several rounds, and the
// dequantizers. The input holds the edge cases the block format defines (kernels/quant/quantize_block.h): a
// zero block, blocks with NaN and inf, subnormal blocks, FLT_MAX; slices whose last block is short.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <exception>
#include <limits>
#include <string>
#include <vector>

#include "kernels/quant/quantize.h"
#include "tensor/half.h"
#include "tests/gpu_check/checks.h"

namespace gpt::gpu_check {
namespace {

// One 124M layer's parameters split over 4 ranks, odd so that every slice ends in a short block.
constexpr int64_t kSliceLen = 1771969;
constexpr int64_t kCount = 4;
constexpr int kBlocks[] = {512, 2048};  // qgZ's and qwZ's default block sizes

std::vector<float> quantizer_input(uint64_t seed) {
  std::vector<float> v = normal_values(kSliceLen * kCount, seed, 0.02f);
  // Special blocks at offsets that start a block for both block sizes (multiples of 2048).
  v[7] = std::numeric_limits<float>::quiet_NaN();
  v[2048 + 9] = std::numeric_limits<float>::infinity();
  for (int i = 0; i < 2048; ++i) v[4096 + i] = float(i % 200) * 1e-44f;  // subnormal: rounded-up scales
  v[6144] = FLT_MAX;
  v[6145] = -FLT_MAX;
  std::fill(v.begin() + 8192, v.begin() + 10240, 0.0f);
  return v;
}

// The fp32 values as `dtype` bits (the CPU's exact narrowing), for quantizing half-precision input.
std::vector<uint8_t> as_dtype(const std::vector<float>& v, DType dtype) {
  std::vector<uint8_t> bytes(dtype_bytes(dtype, int64_t(v.size())));
  if (dtype == DType::kF32) {
    std::memcpy(bytes.data(), v.data(), bytes.size());
  } else if (dtype == DType::kF16) {
    f32_to_f16(v.data(), reinterpret_cast<uint16_t*>(bytes.data()), int64_t(v.size()));
  } else {
    f32_to_bf16(v.data(), reinterpret_cast<uint16_t*>(bytes.data()), int64_t(v.size()));
  }
  return bytes;
}

std::string flags_text(bool cpu, bool gpu) {
  return std::string("finite cpu ") + (cpu ? "1" : "0") + " gpu " + (gpu ? "1" : "0");
}

std::string label(int bits, int block) {
  return "int" + std::to_string(bits) + " block " + std::to_string(block);
}

void check_quantize(Table& table, Backends& backends, DType dtype, int bits, int block) {
  Scratch x(backends);
  const int64_t n = kSliceLen * kCount;
  const Twin& in = x.raw({n}, dtype, as_dtype(quantizer_input(101), dtype));
  const int64_t bytes = kCount * int64_t(quant::quantized_bytes(kSliceLen, bits, block));
  const Twin& out = x.raw({bytes}, DType::kI8, {});
  const char* name = dtype == DType::kF32 ? "fp32" : dtype == DType::kF16 ? "fp16" : "bf16";
  const std::string op = "quantize " + label(bits, block);
  try {
    const bool cpu = backends.cpu.quantize(out.cpu, in.cpu, kSliceLen, kCount, bits, block);
    const bool gpu = backends.gpu.quantize(out.gpu, in.gpu, kSliceLen, kCount, bits, block);
    add_bytes_row(table, op, name, shape_string({kCount, kSliceLen}), x.bytes(out, false), x.bytes(out, true),
                  cpu == gpu, flags_text(cpu, gpu));
  } catch (const std::exception& e) {
    table.add_failure(op, name, shape_string({kCount, kSliceLen}), e.what());
  }
}

// Three rounds of qgZ's LoCo feedback on each side, each side keeping its own error: the new error and the
// codes must stay identical round after round.
void check_feedback(Table& table, Backends& backends, int bits, int block) {
  Scratch x(backends);
  const int64_t n = kSliceLen * kCount;
  const int64_t bytes = kCount * int64_t(quant::quantized_bytes(kSliceLen, bits, block));
  const int64_t error_bytes = kCount * int64_t(quant::quantized_bytes(kSliceLen, 8, block));
  const Twin& out = x.raw({bytes}, DType::kI8, {});
  const Twin& error = x.raw({error_bytes}, DType::kI8, {});
  const std::string shape = shape_string({kCount, kSliceLen});
  for (int round = 1; round <= 3; ++round) {
    const std::string op = "quantize_with_feedback " + label(bits, block) + " round " + std::to_string(round);
    try {
      std::vector<float> v = normal_values(n, 200 + round, 0.02f);
      if (round == 2) v[3 * block + 1] = std::numeric_limits<float>::infinity();  // clears that block's error
      const Twin& in = x.values({n}, v);
      const bool cpu = backends.cpu.quantize_with_feedback(out.cpu, in.cpu, error.cpu, kSliceLen, kCount,
                                                           bits, block, 0.8f);
      const bool gpu = backends.gpu.quantize_with_feedback(out.gpu, in.gpu, error.gpu, kSliceLen, kCount,
                                                           bits, block, 0.8f);
      add_bytes_row(table, op + " out", "fp32", shape, x.bytes(out, false), x.bytes(out, true), cpu == gpu,
                    flags_text(cpu, gpu));
      add_bytes_row(table, op + " error", "int8", shape, x.bytes(error, false), x.bytes(error, true));
    } catch (const std::exception& e) {
      table.add_failure(op, "fp32", shape, e.what());
      return;
    }
  }
}

// dequantize (rounded to each compute dtype) and dequantize_add of the CPU's quantized bytes.
void check_dequantize(Table& table, Backends& backends, int bits, int block) {
  Scratch x(backends);
  const int64_t n = kSliceLen * kCount;
  std::vector<uint8_t> wire(kCount * quant::quantized_bytes(kSliceLen, bits, block));
  const std::vector<float> v = quantizer_input(301);
  quant::quantize_slices(v.data(), kSliceLen, kCount, bits, block, wire.data());
  const Twin& in = x.raw({int64_t(wire.size())}, DType::kI8, wire);
  const Twin& out = x.random({n}, 302);
  const std::string shape = shape_string({kCount, kSliceLen});
  for (DType round_to : {DType::kF32, DType::kF16, DType::kBF16}) {
    const std::string to = round_to == DType::kF32 ? "fp32" : round_to == DType::kF16 ? "fp16" : "bf16";
    try {
      x.reset(out, false);
      x.reset(out, true);
      backends.cpu.dequantize(out.cpu, in.cpu, kSliceLen, kCount, bits, block, round_to);
      backends.gpu.dequantize(out.gpu, in.gpu, kSliceLen, kCount, bits, block, round_to);
      add_bytes_row(table, "dequantize " + label(bits, block) + " to " + to, "fp32", shape,
                    x.bytes(out, false), x.bytes(out, true));
    } catch (const std::exception& e) {
      table.add_failure("dequantize " + label(bits, block) + " to " + to, "fp32", shape, e.what());
    }
  }
  try {
    x.reset(out, false);
    x.reset(out, true);
    backends.cpu.dequantize_add(out.cpu, in.cpu, kSliceLen, kCount, bits, block);
    backends.gpu.dequantize_add(out.gpu, in.gpu, kSliceLen, kCount, bits, block);
    add_bytes_row(table, "dequantize_add " + label(bits, block), "fp32", shape, x.bytes(out, false),
                  x.bytes(out, true));
  } catch (const std::exception& e) {
    table.add_failure("dequantize_add " + label(bits, block), "fp32", shape, e.what());
  }
}

}  // namespace

void check_quantizers(Table& table, Backends& backends, const Shapes&) {
  for (int bits : {8, 4}) {
    for (int block : kBlocks) {
      for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16})
        check_quantize(table, backends, dtype, bits, block);
      check_feedback(table, backends, bits, block);
      check_dequantize(table, backends, bits, block);
    }
  }
}

}  // namespace gpt::gpu_check
