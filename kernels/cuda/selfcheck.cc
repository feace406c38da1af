// The CUDA kernels against naive double-precision host references (see selfcheck.h).
//
// Inputs are drawn in fp32, rounded to the storage dtype on the host with tensor/half.h, and the reference
// works from exactly those rounded values, so the only differences allowed are the device's own: fp32
// accumulation (bounded by k * 2^-23 * sum |terms| for a k-term sum, any order) and the final rounding to
// the output dtype (half an ulp: 2^-11 relative for fp16, 2^-8 for bf16, 2^-24 for fp32). The bounds are
// worst cases, so a correct kernel stays well below them and a wrong one lands far above.
#include "kernels/cuda/selfcheck.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numbers>
#include <random>
#include <stdexcept>

#include "kernels/cuda/gelu.h"
#include "kernels/cuda/linear.h"
#include "tensor/half.h"

namespace gpt::cuda {
namespace {

// Host-side storage of a dtype: values held as fp32 (already representable in the dtype) plus the raw
// elements to upload.
struct HostArray {
  DType dtype;
  std::vector<float> values;
  std::vector<uint8_t> raw;
};

double unit_roundoff(DType dtype) {
  switch (dtype) {
    case DType::kF16:
      return std::ldexp(1.0, -11);
    case DType::kBF16:
      return std::ldexp(1.0, -8);
    default:
      return std::ldexp(1.0, -24);
  }
}

// An absolute floor for the bound: rounding in the dtype's subnormal range is absolute, not relative.
double tiny(DType dtype) {
  return dtype == DType::kF16 ? std::ldexp(1.0, -25) : std::ldexp(1.0, -127);
}

HostArray make_array(DType dtype, size_t n, float scale, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, scale);
  HostArray a{dtype, std::vector<float>(n), std::vector<uint8_t>(n * dtype_size(dtype))};
  for (size_t i = 0; i < n; ++i) {
    const float x = normal(rng);
    if (dtype == DType::kF32) {
      a.values[i] = x;
      std::memcpy(a.raw.data() + 4 * i, &x, 4);
    } else {
      const uint16_t bits = dtype == DType::kF16 ? f32_to_f16(x) : f32_to_bf16(x);
      a.values[i] = dtype == DType::kF16 ? f16_to_f32(bits) : bf16_to_f32(bits);
      std::memcpy(a.raw.data() + 2 * i, &bits, 2);
    }
  }
  return a;
}

std::vector<float> widen(DType dtype, const std::vector<uint8_t>& raw) {
  const size_t n = raw.size() / dtype_size(dtype);
  std::vector<float> out(n);
  if (dtype == DType::kF32) {
    std::memcpy(out.data(), raw.data(), raw.size());
    return out;
  }
  std::vector<uint16_t> bits(n);
  std::memcpy(bits.data(), raw.data(), raw.size());
  if (dtype == DType::kF16) {
    f16_to_f32(bits.data(), out.data(), static_cast<int64_t>(n));
  } else {
    bf16_to_f32(bits.data(), out.data(), static_cast<int64_t>(n));
  }
  return out;
}

DeviceBuffer upload(const Context& ctx, const std::vector<uint8_t>& raw) {
  DeviceBuffer buffer(raw.size());
  buffer.copy_from_host(ctx, raw.data(), raw.size());
  return buffer;
}

std::vector<uint8_t> download(const Context& ctx, const DeviceBuffer& buffer) {
  std::vector<uint8_t> raw(buffer.size());
  buffer.copy_to_host(ctx, raw.data(), raw.size());
  return raw;
}

// Compares got against reference with bound_i = 2 * roundoff * |ref_i| + accumulation_i + tiny. One rounding
// to the output dtype is the contract; the factor 2 leaves room for an extra rounding a library kernel may
// take internally, while a real bug (wrong layout, missing bias, lost accumulation) is off by far more.
Measurement compare(std::string what, const std::vector<float>& got, const std::vector<double>& reference,
                    const std::vector<double>& accumulation, DType out_dtype) {
  Measurement m{std::move(what)};
  for (size_t i = 0; i < got.size(); ++i) {
    const double error = std::fabs(static_cast<double>(got[i]) - reference[i]);
    const double bound =
        2 * unit_roundoff(out_dtype) * std::fabs(reference[i]) + accumulation[i] + tiny(out_dtype);
    m.max_abs_error = std::max(m.max_abs_error, error);
    m.worst_ratio = std::max(m.worst_ratio, std::isfinite(error) ? error / bound : INFINITY);
  }
  return m;
}

std::string shape_text(const char* name, int64_t rows, int64_t cols) {
  return std::string(name) + "[" + std::to_string(rows) + "," + std::to_string(cols) + "]";
}

template <typename T>
std::vector<Measurement> run_linear(const Context& ctx, DType dtype, int N, int C, int OC, bool with_bias,
                                    uint64_t seed) {
  std::mt19937_64 rng(seed);
  const HostArray inp = make_array(dtype, size_t(N) * C, 1.0f, rng);
  const HostArray weight = make_array(dtype, size_t(OC) * C, 0.02f, rng);
  const HostArray bias = make_array(dtype, OC, 0.1f, rng);
  const HostArray dout = make_array(dtype, size_t(N) * OC, 1.0f, rng);
  const HostArray dinp0 = make_array(dtype, size_t(N) * C, 0.1f, rng);
  const HostArray dweight0 = make_array(DType::kF32, size_t(OC) * C, 0.1f, rng);
  const HostArray dbias0 = make_array(DType::kF32, OC, 0.1f, rng);

  DeviceBuffer d_inp = upload(ctx, inp.raw), d_weight = upload(ctx, weight.raw),
               d_bias = upload(ctx, bias.raw);
  DeviceBuffer d_out(size_t(N) * OC * sizeof(T)), d_dout = upload(ctx, dout.raw);
  DeviceBuffer d_dinp = upload(ctx, dinp0.raw), d_dweight = upload(ctx, dweight0.raw),
               d_dbias = upload(ctx, dbias0.raw);
  linear_forward<T>(ctx, d_out.as<T>(), d_inp.as<T>(), d_weight.as<T>(), with_bias ? d_bias.as<T>() : nullptr,
                    N, C, OC);
  linear_backward<T>(ctx, d_dinp.as<T>(), d_dweight.as<float>(), with_bias ? d_dbias.as<float>() : nullptr,
                     d_dout.as<T>(), d_inp.as<T>(), d_weight.as<T>(), N, C, OC);
  ctx.synchronize();

  const double fp32_accumulation = std::ldexp(1.0, -23);
  std::vector<double> ref(size_t(N) * OC), acc(size_t(N) * OC);
  for (int n = 0; n < N; ++n) {
    for (int o = 0; o < OC; ++o) {
      double sum = with_bias ? bias.values[o] : 0.0, magnitude = std::fabs(sum);
      for (int c = 0; c < C; ++c) {
        const double term = double(inp.values[size_t(n) * C + c]) * weight.values[size_t(o) * C + c];
        sum += term;
        magnitude += std::fabs(term);
      }
      ref[size_t(n) * OC + o] = sum;
      acc[size_t(n) * OC + o] = (C + 1) * fp32_accumulation * magnitude;
    }
  }
  const char* type = dtype_name(dtype);
  std::vector<Measurement> result;
  result.push_back(compare(std::string("linear ") + type + " forward " + shape_text("out", N, OC),
                           widen(dtype, download(ctx, d_out)), ref, acc, dtype));

  ref.assign(size_t(N) * C, 0.0);
  acc.assign(size_t(N) * C, 0.0);
  for (int n = 0; n < N; ++n) {
    for (int c = 0; c < C; ++c) {
      double sum = 0.0, magnitude = 0.0;  // dinp0 is overwritten
      for (int o = 0; o < OC; ++o) {
        const double term = double(dout.values[size_t(n) * OC + o]) * weight.values[size_t(o) * C + c];
        sum += term;
        magnitude += std::fabs(term);
      }
      ref[size_t(n) * C + c] = sum;
      acc[size_t(n) * C + c] = (OC + 1) * fp32_accumulation * magnitude;
    }
  }
  result.push_back(compare(std::string("linear ") + type + " backward " + shape_text("dinp", N, C),
                           widen(dtype, download(ctx, d_dinp)), ref, acc, dtype));

  ref.assign(size_t(OC) * C, 0.0);
  acc.assign(size_t(OC) * C, 0.0);
  for (int o = 0; o < OC; ++o) {
    for (int c = 0; c < C; ++c) {
      double sum = dweight0.values[size_t(o) * C + c], magnitude = std::fabs(sum);
      for (int n = 0; n < N; ++n) {
        const double term = double(dout.values[size_t(n) * OC + o]) * inp.values[size_t(n) * C + c];
        sum += term;
        magnitude += std::fabs(term);
      }
      ref[size_t(o) * C + c] = sum;
      acc[size_t(o) * C + c] = (N + 1) * fp32_accumulation * magnitude;
    }
  }
  result.push_back(compare(std::string("linear ") + type + " backward " + shape_text("dweight", OC, C),
                           widen(DType::kF32, download(ctx, d_dweight)), ref, acc, DType::kF32));

  if (with_bias) {
    ref.assign(OC, 0.0);
    acc.assign(OC, 0.0);
    for (int o = 0; o < OC; ++o) {
      double sum = dbias0.values[o], magnitude = std::fabs(sum);
      for (int n = 0; n < N; ++n) {
        sum += dout.values[size_t(n) * OC + o];
        magnitude += std::fabs(dout.values[size_t(n) * OC + o]);
      }
      ref[o] = sum;
      acc[o] = (N + 1) * fp32_accumulation * magnitude;
    }
    result.push_back(compare(std::string("linear ") + type + " backward dbias[" + std::to_string(OC) + "]",
                             widen(DType::kF32, download(ctx, d_dbias)), ref, acc, DType::kF32));
  }
  return result;
}

template <typename T>
std::vector<Measurement> run_gelu(const Context& ctx, DType dtype, int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const HostArray inp = make_array(dtype, n, 2.0f, rng);
  const HostArray dout = make_array(dtype, n, 1.0f, rng);
  const HostArray dinp0 = make_array(dtype, n, 0.1f, rng);
  DeviceBuffer d_inp = upload(ctx, inp.raw), d_dout = upload(ctx, dout.raw), d_dinp = upload(ctx, dinp0.raw);
  DeviceBuffer d_out(size_t(n) * sizeof(T));
  gelu_forward<T>(ctx, d_out.as<T>(), d_inp.as<T>(), n);
  gelu_backward<T>(ctx, d_dinp.as<T>(), d_inp.as<T>(), d_dout.as<T>(), n);
  ctx.synchronize();

  // The fp32 evaluation of the polynomial, tanh and the products: a few fp32 ulps of each term, where the
  // error of tanh's argument (~|x| + x^3 terms) reaches the result scaled by about |x|.
  const double fp32_math = 32 * std::ldexp(1.0, -24);
  const double s = std::sqrt(2.0 / std::numbers::pi), k = 0.044715;
  std::vector<double> ref(n), acc(n), dref(n), dacc(n);
  for (int64_t i = 0; i < n; ++i) {
    const double x = inp.values[i], ax = std::fabs(x);
    const double t = std::tanh(s * (x + k * x * x * x));
    const double growth = 1.0 + ax + x * x + k * x * x * x * x;
    ref[i] = 0.5 * x * (1.0 + t);
    acc[i] = fp32_math * growth;
    const double grad = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * s * (1.0 + 3.0 * k * x * x);
    const double product = grad * dout.values[i];
    dref[i] = product;  // dinp0 is overwritten
    dacc[i] = fp32_math * (std::fabs(product) + std::fabs(dout.values[i]) * growth);
  }
  const std::string type = dtype_name(dtype);
  return {compare("gelu " + type + " forward [" + std::to_string(n) + "]", widen(dtype, download(ctx, d_out)),
                  ref, acc, dtype),
          compare("gelu " + type + " backward [" + std::to_string(n) + "]",
                  widen(dtype, download(ctx, d_dinp)), dref, dacc, dtype)};
}

}  // namespace

std::string Measurement::describe() const {
  char text[256];
  std::snprintf(text, sizeof text, "%-48s max abs error %.3e, %5.1f%% of bound  %s", what.c_str(),
                max_abs_error, 100.0 * worst_ratio, ok() ? "ok" : "FAILED");
  return text;
}

std::vector<Measurement> check_linear(const Context& ctx, DType dtype, int N, int C, int OC, bool with_bias,
                                      uint64_t seed) {
  switch (dtype) {
    case DType::kF32:
      return run_linear<float>(ctx, dtype, N, C, OC, with_bias, seed);
    case DType::kF16:
      return run_linear<__half>(ctx, dtype, N, C, OC, with_bias, seed);
    case DType::kBF16:
      return run_linear<__nv_bfloat16>(ctx, dtype, N, C, OC, with_bias, seed);
    default:
      throw std::invalid_argument(std::string("check_linear: no CUDA linear for ") + dtype_name(dtype));
  }
}

std::vector<Measurement> check_gelu(const Context& ctx, DType dtype, int64_t n, uint64_t seed) {
  switch (dtype) {
    case DType::kF32:
      return run_gelu<float>(ctx, dtype, n, seed);
    case DType::kF16:
      return run_gelu<__half>(ctx, dtype, n, seed);
    case DType::kBF16:
      return run_gelu<__nv_bfloat16>(ctx, dtype, n, seed);
    default:
      throw std::invalid_argument(std::string("check_gelu: no CUDA GELU for ") + dtype_name(dtype));
  }
}

}  // namespace gpt::cuda
