// The three modes of the op-case table; see run_case.h.
#include "kernels/cases/run_case.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <limits>

#include "kernels/common/random.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/flash_cpu_ops.h"
#include "tensor/arena.h"
#include "tensor/half.h"

namespace gpt::cases {
namespace {

// A case's tensors on one backend in one float dtype (fp32 for the Args that keep fp32 under fp16 and bf16),
// each holding its Arg's starting values. The values are drawn in fp32 and rounded to the tensor's dtype, so
// every dtype's reference starts where the backend does.
class Materialized {
 public:
  // With `from`, the tensors start at from's starting values instead of drawing their own (a reference
  // starts where the backend did; its own draw would be overwritten, at the cost of a draw and a copy of
  // every element).
  Materialized(Ops& ops, const std::vector<Arg>& args, DType dtype, int offset,
               const Materialized* from = nullptr)
      : ops_(ops), arena_("op case", Arena::kUnlimited, &ops.device_memory()), from_(from) {
    for (size_t i = 0; i < args.size(); ++i) {
      const Arg& a = args[i];
      const bool tokens = a.token_below > 0;
      const bool half = dtype == DType::kF16 || dtype == DType::kBF16;
      const Arg shaped = on_backend(a, ops);
      const DType own = tokens ? DType::kI32 : (shaped.fp32 && half ? DType::kF32 : dtype);
      int64_t n = 1;
      for (int64_t d : shaped.shape) n *= d;
      Tensor t = arena_.allocate_tensor(a.name, "op case", {n + (tokens ? 0 : offset)}, own);
      if (!tokens) t.data = static_cast<char*>(t.data) + offset * dtype_size(own);
      t.shape = shaped.shape;
      tensors.by_name[a.name] = t;
      if (!from_) starts_[a.name] = starting_values(shaped, i, own);
      set(a.name, start(a.name));
    }
  }

  CaseTensors tensors;

  // The Arg as this backend holds it: attention's residual [B, NH, T] where the backend keeps the
  // log-sum-exp, which the mixed-precision contract keeps in fp32.
  static Arg on_backend(Arg a, const Ops& ops) {
    if (a.attention_residual && ops.attention_residual() == AttentionResidual::kLogSumExp) {
      a.shape.pop_back();
      a.fp32 = true;
    }
    return a;
  }

  const std::vector<double>& start(const std::string& name) const {
    return from_ ? from_->start(name) : starts_.at(name);
  }

  void set(const std::string& name, const std::vector<double>& values) {
    const Tensor& t = tensors[name];
    std::vector<uint8_t> bytes(t.nbytes());
    const int64_t n = int64_t(values.size());
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) put(t.dtype, bytes.data(), size_t(i), values[size_t(i)]);
    ops_.upload(t, bytes.data());
  }

  std::vector<double> get(const std::string& name) {
    const Tensor& t = tensors[name];
    std::vector<uint8_t> bytes(t.nbytes());
    ops_.download(bytes.data(), t);
    std::vector<double> values(size_t(t.numel()));
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < t.numel(); ++i) values[size_t(i)] = take(t.dtype, bytes.data(), size_t(i));
    return values;
  }

 private:
  static std::vector<double> starting_values(const Arg& a, size_t index, DType dtype) {
    int64_t n = 1;
    for (int64_t d : a.shape) n *= d;
    std::vector<double> v(size_t(n), 0.0);
    const uint64_t key = random::derive_key(0x0b5ca5e5ull, index);
    // Each value depends on its index alone, so the threads split the draw without changing it.
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      if (a.token_below > 0) {
        // Half the ids from the 64 most frequent: repeats stress the embedding's gradient sums.
        const uint64_t bits = random::bits(key, uint64_t(i));
        const uint64_t range = (bits & 1) ? std::min<uint64_t>(64, uint64_t(a.token_below)) : a.token_below;
        v[size_t(i)] = double((bits >> 1) % range);
      } else if (a.scale != 0) {
        double x = random::normal(key, uint64_t(i)) * a.scale;
        if (a.squared) x *= x;
        v[size_t(i)] = take(dtype, nullptr, 0, float(x));
      }
    }
    return v;
  }

  // The value `f` rounded as dtype holds it (bytes == nullptr), or element i of bytes.
  static double take(DType dtype, const uint8_t* bytes, size_t i, float f = 0) {
    switch (dtype) {
      case DType::kF64:
        return bytes ? reinterpret_cast<const double*>(bytes)[i] : double(f);
      case DType::kF16:
        return f16_to_f32(bytes ? reinterpret_cast<const uint16_t*>(bytes)[i] : f32_to_f16(f));
      case DType::kBF16:
        return bf16_to_f32(bytes ? reinterpret_cast<const uint16_t*>(bytes)[i] : f32_to_bf16(f));
      case DType::kI32:
        return bytes ? reinterpret_cast<const int32_t*>(bytes)[i] : double(int32_t(f));
      default:
        return bytes ? reinterpret_cast<const float*>(bytes)[i] : double(f);
    }
  }
  static void put(DType dtype, uint8_t* bytes, size_t i, double value) {
    switch (dtype) {
      case DType::kF64:
        reinterpret_cast<double*>(bytes)[i] = value;
        break;
      case DType::kF16:
        reinterpret_cast<uint16_t*>(bytes)[i] = f32_to_f16(float(value));
        break;
      case DType::kBF16:
        reinterpret_cast<uint16_t*>(bytes)[i] = f32_to_bf16(float(value));
        break;
      case DType::kI32:
        reinterpret_cast<int32_t*>(bytes)[i] = int32_t(value);
        break;
      default:
        reinterpret_cast<float*>(bytes)[i] = float(value);
        break;
    }
  }

  Ops& ops_;
  Arena arena_;
  const Materialized* from_;
  std::map<std::string, std::vector<double>> starts_;  // empty with from_
};

Result result_for(const std::string& op, const Variant& v, const std::string& shape, double tol) {
  Result r;
  r.op = op;
  r.dtype = v.label;
  r.shape = shape;
  r.tolerance = tol;
  return r;
}

void run_whole(const OpCase& c, Ops& ops, const CaseTensors& t) {
  if (c.prepare) c.prepare(ops, t);
  c.run(ops, t);
}

// The CPU backend that keeps what `ops` keeps of attention (Ops::attention_residual): the default CpuOps
// (the probabilities) or the CPU's flash attention (the log-sum-exp), so every output has its twin.
Ops& reference_ops(const Ops& ops) {
  static FlashCpuOps flash;
  if (ops.attention_residual() == AttentionResidual::kLogSumExp) return flash;
  return cpu_ops();
}

// The case's outputs computed on the CPU (in fp64 unless the case says) from the starting values the
// backend's tensors hold.
std::vector<std::vector<double>> reference_outputs(const OpCase& c, const Ops& ops,
                                                   Materialized& on_backend) {
  Ops& reference = reference_ops(ops);
  Materialized ref(reference, c.args, c.reference, 0, &on_backend);
  run_whole(c, reference, ref.tensors);
  std::vector<std::vector<double>> outputs;
  for (const std::string& name : c.outputs) outputs.push_back(ref.get(name));
  return outputs;
}

// Runs body, which returns the case's results; an exception instead gives one result for the whole case:
// "not supported" for UnsupportedOp (the backend lacks the op in this dtype), a failure with its message for
// anything else.
template <typename Body>
std::vector<Result> guarded(Result whole_case, Body&& body) {
  try {
    return body();
  } catch (const UnsupportedOp& e) {
    whole_case.verdict = Verdict::kUnsupported;
    whole_case.message = e.what();
  } catch (const std::exception& e) {
    whole_case.message = e.what();
  }
  return {whole_case};
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i) sum += a[i] * b[i];
  return sum;
}

}  // namespace

double tolerance(const OpCase& c, const Variant& v) {
  const DType rounded = v.dtype == DType::kF32 ? v.matmul_inputs : v.dtype;
  return c.tolerance + (rounded == DType::kF16 ? 1e-2 : rounded == DType::kBF16 ? 4e-2 : 0.0);
}

const char* verdict_name(Verdict v) {
  return v == Verdict::kPass ? "PASS" : v == Verdict::kFail ? "FAIL" : "not supported";
}

double max_relative_error(const std::vector<double>& ref, const std::vector<double>& got) {
  if (ref.size() != got.size()) return std::numeric_limits<double>::infinity();
  double largest = 0, worst = 0;
  bool finite = true;
  const int64_t n = int64_t(ref.size());
  // Maxima and a logical and: the same answer in any order, so in any number of threads.
#pragma omp parallel for schedule(static) reduction(max : largest, worst) reduction(&& : finite)
  for (int64_t i = 0; i < n; ++i) {
    finite = finite && std::isfinite(ref[size_t(i)]) && std::isfinite(got[size_t(i)]);
    largest = std::max(largest, std::fabs(ref[size_t(i)]));
    worst = std::max(worst, std::fabs(got[size_t(i)] - ref[size_t(i)]));
  }
  if (!finite) return std::numeric_limits<double>::infinity();
  return largest > 0 ? worst / largest : worst;
}

std::vector<Result> compare_to_reference(Ops& ops, const OpCase& c, const Variant& v) {
  const double tol = tolerance(c, v);
  return guarded(result_for(c.op, v, c.shape, tol), [&] {
    Materialized on_backend(ops, c.args, v.dtype, c.offset);
    ops.set_matmul_inputs(v.matmul_inputs);
    struct Exact {  // back to exact GEMMs however the case ends
      Ops& ops;
      ~Exact() { ops.set_matmul_inputs(DType::kF32); }
    } exact{ops};
    run_whole(c, ops, on_backend.tensors);
    const std::vector<std::vector<double>> expected = reference_outputs(c, ops, on_backend);
    std::vector<Result> results;
    for (size_t i = 0; i < c.outputs.size(); ++i) {
      Result r = result_for(c.op + " " + c.outputs[i], v, c.shape, tol);
      r.error = max_relative_error(expected[i], on_backend.get(c.outputs[i]));
      r.verdict = r.error <= tol ? Verdict::kPass : Verdict::kFail;
      results.push_back(r);
    }
    return results;
  });
}

// Each input along a random direction u: (L(x + hu) - L(x - hu)) / 2h against the backward's <dL/dx, u>,
// with L = <dout, output>. h is 1e-4 of the input's largest magnitude: in fp64 the rounding then stays near
// 1e-12 and the truncation near 1e-8 of the derivative, more where a small case's few terms cancel (GELU at
// T = 1: 1.1e-6); a wrong backward is off by far more than the 1e-5 allowed.
std::vector<Result> check_gradient(Ops& ops, const GradientCase& g) {
  constexpr double kTolerance = 1e-5;
  return guarded(result_for(g.op, kFp64, g.shape, kTolerance), [&] {
    std::vector<Result> results;
    Materialized m(ops, g.args, DType::kF64, g.offset);
    g.forward(ops, m.tensors);
    g.backward(ops, m.tensors);
    const std::vector<double> w = m.get(g.dout);
    auto loss = [&] {
      g.forward(ops, m.tensors);
      return dot(w, m.get(g.output));
    };
    for (size_t k = 0; k < g.wrt.size(); ++k) {
      const auto& [input, gradient] = g.wrt[k];
      std::vector<double> grad = m.get(gradient);
      for (size_t i = 0; i < grad.size(); ++i) grad[i] -= m.start(gradient)[i];
      const std::vector<double>& x = m.start(input);
      double largest = 1e-30;
      for (double value : x) largest = std::max(largest, std::fabs(value));
      const double h = 1e-4 * largest;
      std::vector<double> u(x.size()), moved(x.size());
      for (size_t i = 0; i < u.size(); ++i) u[i] = random::normal(random::derive_key(0xd1ec7, k), i);
      for (size_t i = 0; i < x.size(); ++i) moved[i] = x[i] + h * u[i];
      m.set(input, moved);
      const double up = loss();
      for (size_t i = 0; i < x.size(); ++i) moved[i] = x[i] - h * u[i];
      m.set(input, moved);
      const double down = loss();
      m.set(input, x);
      const double numeric = (up - down) / (2 * h), analytic = dot(grad, u);
      Result r = result_for(g.op + " d" + input, kFp64, g.shape, kTolerance);
      r.error = std::fabs(numeric - analytic) / std::max({std::fabs(numeric), std::fabs(analytic), 1e-300});
      r.verdict = r.error <= kTolerance ? Verdict::kPass : Verdict::kFail;
      results.push_back(r);
    }
    return results;
  });
}

Timing time_case(Ops& ops, const OpCase& c, int reps) {
  Materialized m(ops, c.args, DType::kF32, c.offset);
  run_whole(c, ops, m.tensors);  // warm-up (and any one-time setup of a library)
  ops.synchronize();
  std::vector<double> ms(size_t(std::max(reps, 1)));
  for (double& t : ms) {
    const auto start = std::chrono::steady_clock::now();
    c.run(ops, m.tensors);
    ops.synchronize();
    t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  }
  std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
  Timing timing;
  timing.ms = ms[ms.size() / 2];
  timing.gflops = c.flops > 0 ? c.flops / (timing.ms * 1e6) : 0;
  return timing;
}

}  // namespace gpt::cases
