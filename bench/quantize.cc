// Block quantizer benchmark (kernels/quant): throughput of quantize, dequantize (to fp32, and onto the fp16
// grid as qwZ's gathered weights are: deq_f16) and dequantize-add in GB/s of fp32 values (one thread by
// default), LoCo's quantize-with-feedback (qgZ), and the quantization error, for int8 and int4 at block
// sizes 64..4096 on three distributions: Gaussian N(0, 1) (also freshly initialized weights: the errors are
// scale-free); GPT-2-like weights, N(0, 0.02) with 0.05% outliers of 0.2..1.0; gradient-like heavy tails
// (Student t, 3 degrees of freedom, times 1e-3). This is the measurement behind the default block sizes: the
// error a block size buys against the 4/B bytes per value its fp32 scales cost.
//
// Errors over the whole array: rel_l2 = ||x - x'|| / ||x||, mean_rel = mean |x - x'| / mean |x|,
// max_err = max |x - x'| / max |x|. Each throughput is also given against a plain memcpy of the same fp32
// bytes timed in the same run (quant_vs_copy = quantize GB/s / memcpy GB/s). A table goes to stderr and one
// JSON line per setting to stdout. A benchmark: it never fails on time.
//
// usage: quantize [--n VALUES] [--threads T] [--reps R]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/flags.h"
#include "base/main.h"
#include "kernels/quant/quantize.h"

namespace {

struct Options {
  int64_t n = int64_t{1} << 22;
  int threads = 1;
  int reps = 5;
};

// Returns false when --help was printed.
bool parse(int argc, char** argv, Options& options) {
  gpt::FlagParser flags("bench/quantize",
                        "Block quantizers (int8, int4): throughput and error by block size on three value "
                        "distributions.");
  flags.add_int64("--n", &options.n, "values per array", 1, int64_t(1) << 40);
  flags.add_int("--threads", &options.threads, "OpenMP threads", 1, 1024);
  flags.add_int("--reps", &options.reps, "timed calls per measurement (the median is shown)", 1, 1 << 20);
  return flags.parse(argc, argv);
}

std::vector<float> make_data(const std::string& kind, int64_t n) {
  std::mt19937_64 rng(2024);
  std::vector<float> x(n);
  if (kind == "gaussian") {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (auto& v : x) v = normal(rng);
  } else if (kind == "weights") {
    std::normal_distribution<float> normal(0.0f, 0.02f);
    std::uniform_real_distribution<float> outlier(0.2f, 1.0f);
    std::bernoulli_distribution is_outlier(0.0005), negative(0.5);
    for (auto& v : x) v = is_outlier(rng) ? (negative(rng) ? -1.0f : 1.0f) * outlier(rng) : normal(rng);
  } else {
    std::student_t_distribution<float> heavy(3.0f);
    for (auto& v : x) v = 1e-3f * heavy(rng);
  }
  return x;
}

// Median seconds of `reps` timed calls after one untimed warm-up.
template <class F>
double median_seconds(int reps, F&& call) {
  call();
  std::vector<double> seconds;
  for (int r = 0; r < reps; ++r) {
    const auto start = std::chrono::steady_clock::now();
    call();
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

struct Errors {
  double rel_l2 = 0, mean_rel = 0, max_err = 0;
};

Errors measure_errors(const std::vector<float>& x, const std::vector<float>& back) {
  double sq_err = 0, sq = 0, abs_err = 0, abs = 0, max_err = 0, max_abs = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double e = std::fabs(double(x[i]) - double(back[i])), a = std::fabs(double(x[i]));
    sq_err += e * e;
    sq += a * a;
    abs_err += e;
    abs += a;
    max_err = std::max(max_err, e);
    max_abs = std::max(max_abs, a);
  }
  return {std::sqrt(sq_err / sq), abs_err / abs, max_err / max_abs};
}

int run(int argc, char** argv) {
  using namespace gpt::quant;
  Options options;
  if (!parse(argc, argv, options)) return 0;
  omp_set_num_threads(options.threads);
  const int64_t n = options.n;
  const double gb = 4.0 * double(n) / 1e9;  // fp32 input bytes

  std::fprintf(stderr, "quantize: %lld values, %d thread(s), median of %d; GB/s of fp32 values\n",
               static_cast<long long>(n), options.threads, options.reps);
  std::fprintf(stderr, "%-9s %4s %5s %9s %8s %10s %10s %10s %8s %8s %8s %8s %8s %8s\n", "data", "bits",
               "block", "bytes/val", "scales", "rel_l2", "mean_rel", "max_err", "quant", "dequant", "deq_f16",
               "deq_add", "feedback", "memcpy");
  for (const std::string dist : {"gaussian", "weights", "gradients"}) {
    const std::vector<float> x = make_data(dist, n);
    std::vector<float> back(n), acc(n);
    for (int bits : {8, 4}) {
      for (int block = 64; block <= 4096; block *= 2) {
        std::vector<uint8_t> wire(quantized_bytes(n, bits, block));
        const double t_quant =
            median_seconds(options.reps, [&] { quantize_slice(x.data(), n, bits, block, wire.data()); });
        const double t_dequant =
            median_seconds(options.reps, [&] { dequantize_slice(wire.data(), n, bits, block, back.data()); });
        const double t_f16 = median_seconds(options.reps, [&] {
          dequantize_slice(wire.data(), n, bits, block, back.data(), gpt::DType::kF16);  // qwZ's fp16 weights
        });
        const double t_add =
            median_seconds(options.reps, [&] { dequantize_add(wire.data(), n, bits, block, acc.data()); });
        std::vector<uint8_t> kept(quantized_bytes(n, 8, block), 0);  // LoCo's kept errors (qgZ)
        const double t_feedback = median_seconds(options.reps, [&] {
          quantize_slices_with_feedback(x.data(), n, 1, bits, block, 0.8f, kept.data(), wire.data());
        });
        const double t_copy = median_seconds(options.reps, [&] {
          std::memcpy(back.data(), x.data(), size_t(n) * sizeof(float));
          asm volatile("" : : "r"(back.data()) : "memory");  // the copy is used
        });
        dequantize_slice(wire.data(), n, bits, block, back.data());
        const Errors err = measure_errors(x, back);
        const double bytes_per_value = double(wire.size()) / double(n);
        const double scale_share = 4.0 / block / (bits / 8.0);  // scale bytes / code bytes
        std::fprintf(
            stderr, "%-9s %4d %5d %9.5f %7.2f%% %10.3e %10.3e %10.3e %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f\n",
            dist.c_str(), bits, block, bytes_per_value, 100 * scale_share, err.rel_l2, err.mean_rel,
            err.max_err, gb / t_quant, gb / t_dequant, gb / t_f16, gb / t_add, gb / t_feedback, gb / t_copy);
        std::printf(
            "{\"bench\": \"quantize\", \"data\": \"%s\", \"bits\": %d, \"block\": %d, \"values\": %lld, "
            "\"threads\": %d, \"bytes_per_value\": %.6f, \"scale_bytes_per_value\": %.6f, "
            "\"scale_share\": %.6f, \"rel_l2\": %.6e, \"mean_rel\": %.6e, \"max_err\": %.6e, "
            "\"quantize_gb_s\": %.3f, \"dequantize_gb_s\": %.3f, \"dequantize_f16_gb_s\": %.3f, "
            "\"dequantize_add_gb_s\": %.3f, "
            "\"quantize_feedback_gb_s\": %.3f, \"memcpy_gb_s\": %.3f, \"quant_vs_copy\": %.3f, "
            "\"dequant_vs_copy\": %.3f, "
            "\"dequant_add_vs_copy\": %.3f}\n",
            dist.c_str(), bits, block, static_cast<long long>(n), options.threads, bytes_per_value,
            4.0 / block, scale_share, err.rel_l2, err.mean_rel, err.max_err, gb / t_quant, gb / t_dequant,
            gb / t_f16, gb / t_add, gb / t_feedback, gb / t_copy, t_copy / t_quant, t_copy / t_dequant,
            t_copy / t_add);
        std::fflush(stdout);
      }
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return gpt::run_main("bench/quantize", [&] { return run(argc, argv); });
}
