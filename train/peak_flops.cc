// MFU's denominator; see peak_flops.h.
#include "train/peak_flops.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "base/user_error.h"

namespace gpt {
namespace {

std::string format(const char* pattern, double value) {
  char text[64];
  std::snprintf(text, sizeof text, pattern, value);
  return text;
}

std::string trim(const std::string& s) {
  const size_t begin = s.find_first_not_of(" \t");
  const size_t end = s.find_last_not_of(" \t\r");
  return begin == std::string::npos ? "" : s.substr(begin, end - begin + 1);
}

// FMA units per core and their width by x86 vendor, family and model range (the first matching row wins). The
// figures are those of the vendors' optimization manuals: AMD's Zen 1 has two 128-bit FMA pipes, Zen 2 to 4
// two 256-bit ones (Zen 4 runs an AVX-512 FMA as two 256-bit halves), Zen 5 two 512-bit ones.
struct CoreRow {
  const char* vendor;
  int family, first_model, last_model;
  const char* name;
  int units, bits;
};
constexpr CoreRow kCores[] = {
    {"AuthenticAMD", 0x17, 0x00, 0x2f, "AMD Zen 1", 2, 128},
    {"AuthenticAMD", 0x17, 0x30, 0xff, "AMD Zen 2", 2, 256},
    {"AuthenticAMD", 0x19, 0x10, 0x1f, "AMD Zen 4", 2, 256},
    {"AuthenticAMD", 0x19, 0x60, 0x7f, "AMD Zen 4", 2, 256},
    {"AuthenticAMD", 0x19, 0xa0, 0xaf, "AMD Zen 4", 2, 256},
    {"AuthenticAMD", 0x19, 0x00, 0x0f, "AMD Zen 3", 2, 256},
    {"AuthenticAMD", 0x19, 0x20, 0x5f, "AMD Zen 3", 2, 256},
    {"AuthenticAMD", 0x1a, 0x00, 0xff, "AMD Zen 5", 2, 512},
};

// The widest float vectors both this build and the CPU have; the CPU's flags are trusted only when present.
int isa_bits(const CpuPeakInput& in) {
  const std::set<std::string>& f = in.cpu.flags;
  if (f.empty()) return in.compiled_vector_bits;
  const int cpu_bits = f.count("avx512f") ? 512 : f.count("avx") ? 256 : 128;
  return std::min(cpu_bits, in.compiled_vector_bits);
}

std::string isa_name(int bits, const std::set<std::string>& flags) {
  if (bits >= 512) return "avx512f";
  if (bits == 256) return flags.count("avx2") ? "avx2" : "avx";
  return flags.empty() ? "128-bit vectors" : "sse";
}

// The cores one rank computes on: its threads, unless the machine's physical cores shared by its ranks are
// fewer (several ranks, or threads beyond the cores: SMT siblings share one core's FMA units).
double rank_cores(const CpuPeakInput& in, std::string& why) {
  const int per_core =
      in.cpu.cores > 0 && in.cpu.siblings >= in.cpu.cores ? in.cpu.siblings / in.cpu.cores : 1;
  const int physical = std::max(1, in.logical_cpus / per_core);
  const double share = double(physical) / std::max(1, in.ranks_on_machine);
  const std::string threads = std::to_string(in.threads_per_rank) + " thread" +
                              (in.threads_per_rank == 1 ? "" : "s") + " per rank (--threads)";
  if (share >= in.threads_per_rank) {
    why = threads;
    return in.threads_per_rank;
  }
  why = std::to_string(physical) + " physical core" + (physical == 1 ? "" : "s") +
        (per_core > 1 ? " (" + std::to_string(per_core) + " CPUs each)" : "") + " shared by " +
        std::to_string(in.ranks_on_machine) + " rank" + (in.ranks_on_machine == 1 ? "" : "s") +
        " on this machine, fewer than the " + threads;
  return share;
}

// The clock in GHz, and where it came from; 0 when nothing gives one. A stated clock below the measured one
// (a hypervisor's /proc/cpuinfo shows the nominal clock, not the boost) gives way to it: the peak is never
// understated, so MFU is never flattered.
double clock_ghz(const CpuPeakInput& in, std::string& why) {
  double ghz = in.cpu.max_mhz / 1e3;
  why = "/proc/cpuinfo cpu MHz, the highest at start-up (no cpufreq cpuinfo_max_freq here)";
  if (in.max_freq_khz > 0) {
    ghz = in.max_freq_khz / 1e6;
    why = "cpuinfo_max_freq";
  }
  if (in.measured_ghz > ghz * 1.02) {
    why = "measured by a chain of dependent adds (best of 20 runs)" +
          (ghz > 0 ? ", above the " + format("%.2f", ghz) + " GHz of " + why.substr(0, why.find(',')) : "");
    ghz = in.measured_ghz;
  }
  return ghz;
}

// As the banner spells precisions (zero/config.h's precision_name): "fp32", "bf16".
std::string gemm_dtype_name(DType dtype) {
  if (dtype == DType::kF32) return "fp32";
  if (dtype == DType::kF16) return "fp16";
  if (dtype == DType::kF64) return "fp64";
  return dtype_name(dtype);
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// This core's clock from a chain of dependent adds (one per cycle on x86 cores): the best of 20 runs of about
// a million cycles, so a run another process preempted is not the one kept. 0 off x86-64.
double measured_clock_ghz() {
#if defined(__x86_64__)
  constexpr long kIterations = 250'000;  // 4 adds each
  double best = 1e30;
  for (int run = 0; run < 20; ++run) {
    uint64_t x = uint64_t(run);
    const auto start = std::chrono::steady_clock::now();
    for (long i = 0; i < kIterations; ++i)
      asm volatile("add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0" : "+r"(x));
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return 4.0 * kIterations / best / 1e9;
#else
  return 0;
#endif
}

int affinity_cpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

}  // namespace

std::string PeakFlops::banner_line() const {
  return "  MFU peak: " + formula + " (" + sources + ")";
}

std::string flops_text(double flops_per_s) {
  const bool tera = flops_per_s >= 1e12;
  return format("%.3g", flops_per_s / (tera ? 1e12 : 1e9)) + (tera ? " TFLOP/s" : " GFLOP/s");
}

CpuInfo parse_cpuinfo(const std::string& text) {
  CpuInfo cpu;
  std::istringstream lines(text);
  bool first = true;  // fields of the first processor only, except the clock
  for (std::string line; std::getline(lines, line);) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = trim(line.substr(0, colon)), value = trim(line.substr(colon + 1));
    if (key == "processor" && !cpu.vendor.empty()) first = false;
    if (key == "cpu MHz") cpu.max_mhz = std::max(cpu.max_mhz, std::atof(value.c_str()));
    if (!first) continue;
    if (key == "vendor_id") cpu.vendor = value;
    if (key == "cpu family") cpu.family = std::atoi(value.c_str());
    if (key == "model") cpu.model = std::atoi(value.c_str());
    if (key == "siblings") cpu.siblings = std::atoi(value.c_str());
    if (key == "cpu cores") cpu.cores = std::atoi(value.c_str());
    if (key == "flags") {
      std::istringstream words(value);
      for (std::string flag; words >> flag;) cpu.flags.insert(flag);
    }
  }
  return cpu;
}

FmaUnits fma_units_of(const CpuInfo& cpu) {
  for (const CoreRow& row : kCores) {
    if (cpu.vendor == row.vendor && cpu.family == row.family && cpu.model >= row.first_model &&
        cpu.model <= row.last_model) {
      return {row.units, row.bits,
              std::string(row.name) + " (family " + std::to_string(cpu.family) + ", model " +
                  std::to_string(cpu.model) + "), " + std::to_string(row.bits) + " bits wide"};
    }
  }
  const std::string what = cpu.vendor.empty() ? "this CPU"
                                              : cpu.vendor + " family " + std::to_string(cpu.family) +
                                                    " model " + std::to_string(cpu.model);
  if (cpu.vendor == "GenuineIntel" && cpu.flags.count("avx512f"))  // Xeon Scalable
    return {2, 512, "assumed 2 for " + what + ", as on Xeon Gold 6000 and Platinum (some Xeons have 1)"};
  if (cpu.vendor == "GenuineIntel") return {2, 256, "assumed 2 for " + what + ", as from Haswell on"};
  return {2, 0, "assumed 2 as wide as the vectors (no table row for " + what + ")"};
}

PeakFlops cpu_peak(const CpuPeakInput& in) {
  std::string cores_why, clock_why;
  const double cores = rank_cores(in, cores_why);
  const FmaUnits fma = fma_units_of(in.cpu);
  const int isa = isa_bits(in);
  const int lane_bits = fma.bits > 0 ? std::min(isa, fma.bits) : isa;
  const int lanes = lane_bits / 32;
  const double ghz = clock_ghz(in, clock_why);
  std::string lanes_why = isa_name(isa, in.cpu.flags);
  if (lane_bits < isa) lanes_why += " on " + std::to_string(lane_bits) + "-bit FMA units";
  PeakFlops peak;
  peak.flops_per_s = cores * fma.units * lanes * 2 * ghz * 1e9;
  peak.formula = format("%g", cores) + (cores == 1 ? " core x " : " cores x ") + std::to_string(fma.units) +
                 " FMA units x " + std::to_string(lanes) + " fp32 lanes x 2 x " + format("%.2f", ghz) +
                 " GHz = " + flops_text(peak.flops_per_s) + " per rank";
  peak.sources = "cores: " + cores_why + "; FMA units: " + fma.source + "; lanes: " + lanes_why +
                 "; clock: " + clock_why;
  return peak;
}

int compiled_vector_bits() {
#if defined(__AVX512F__)
  return 512;
#elif defined(__AVX__)
  return 256;
#else
  return 128;
#endif
}

DatasheetPeak datasheet_peak(const std::string& name, int major, int minor, DType gemm_dtype) {
  // Dense (no sparsity) TFLOP/s from NVIDIA's datasheets: fp32 and fp16/bf16 tensor cores. The first row
  // whose name is in the device's name and whose compute capability matches wins (PCIe and NVL before SXM).
  struct Row {
    const char* match;
    int major, minor;
    const char* entry;
    double fp32, half;
  };
  static constexpr Row kRows[] = {
      {"H100 PCIe", 9, 0, "H100 PCIe", 51, 756}, {"H100 NVL", 9, 0, "H100 NVL", 60, 835},
      {"H100", 9, 0, "H100 SXM", 67, 989},       {"H200 NVL", 9, 0, "H200 NVL", 60, 835},
      {"H200", 9, 0, "H200 SXM", 67, 989},       {"A100", 8, 0, "A100", 19.5, 312},
  };
  const bool half = gemm_dtype == DType::kF16 || gemm_dtype == DType::kBF16;
  if (!half && gemm_dtype != DType::kF32) return {};
  for (const Row& row : kRows) {
    if (name.find(row.match) != std::string::npos && major == row.major && minor == row.minor)
      return {half ? row.half : row.fp32, row.entry};
  }
  return {};
}

int ranks_sharing_gpu(int ranks_on_machine, int gpus, int index) {
  if (gpus <= 0) return 1;
  return std::max(1, ranks_on_machine / gpus + (index < ranks_on_machine % gpus ? 1 : 0));
}

PeakFlops gpu_peak(const BackendGpu& gpu, DType gemm_dtype, int ranks_on_machine) {
  const DatasheetPeak sheet = datasheet_peak(gpu.name, gpu.major, gpu.minor, gemm_dtype);
  if (sheet.tflops <= 0) return {};
  const int sharing = ranks_sharing_gpu(ranks_on_machine, gpu.count, gpu.index);
  PeakFlops peak;
  peak.flops_per_s = sheet.tflops * 1e12 / sharing;
  const std::string dtype = gemm_dtype_name(gemm_dtype);
  peak.formula = gpu.name + " " + dtype + " dense " + flops_text(sheet.tflops * 1e12);
  if (sharing > 1) {
    peak.formula +=
        " / " + std::to_string(sharing) + " ranks sharing the GPU = " + flops_text(peak.flops_per_s);
  }
  peak.formula += " per rank";
  peak.sources = "datasheet, " + sheet.entry + " (sm_" + std::to_string(gpu.major) +
                 std::to_string(gpu.minor) + "); the GEMMs run in " + dtype +
                 (gemm_dtype == DType::kF32 ? " without TF32 (CUBLAS_COMPUTE_32F)" : "");
  return peak;
}

double parse_peak_tflops(const std::string& text) {
  double value = 0;
  std::istringstream in(text);
  if (in >> value && in.eof() && std::isfinite(value) && value > 0) return value;
  throw UsageError(
      "--peak-tflops '" + text +
      "' is not a positive number of TFLOP/s; give the dense peak of the device one rank computes "
      "on, for example 67 (an H100 SXM in fp32) or 0.166 (two Zen 4 cores at 2.6 GHz)");
}

PeakFlops rank_peak_flops(double peak_tflops, const BackendGpu& gpu, DType gemm_dtype, int threads_per_rank,
                          int ranks_on_machine, const std::function<double()>& measure_flops,
                          const std::string& measured_what) {
  PeakFlops peak;
  if (peak_tflops > 0) {
    peak.flops_per_s = peak_tflops * 1e12;
    peak.formula = flops_text(peak.flops_per_s) + " per rank";
    peak.sources = "--peak-tflops";
    return peak;
  }
  std::string unknown;
  if (!gpu.name.empty()) {
    peak = gpu_peak(gpu, gemm_dtype, ranks_on_machine);
    unknown = "no datasheet row for " + gpu.name + " (sm_" + std::to_string(gpu.major) +
              std::to_string(gpu.minor) + ") in " + gemm_dtype_name(gemm_dtype);
  } else {
    CpuPeakInput in;
    in.cpu = parse_cpuinfo(read_text("/proc/cpuinfo"));
    in.compiled_vector_bits = compiled_vector_bits();
    in.max_freq_khz = std::atof(read_text("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq").c_str());
    in.measured_ghz = measured_clock_ghz();
    in.threads_per_rank = threads_per_rank;
    in.logical_cpus = affinity_cpus();
    in.ranks_on_machine = ranks_on_machine;
    peak = cpu_peak(in);
    unknown = "the clock is unknown: neither cpuinfo_max_freq nor /proc/cpuinfo cpu MHz, nor measured";
  }
  if (peak.flops_per_s > 0) return peak;
  peak.flops_per_s = measure_flops();
  peak.formula = flops_text(peak.flops_per_s) + " per rank, measured (" + measured_what + " at start-up)";
  peak.sources = "no stated peak: " + unknown + "; give --peak-tflops";
  return peak;
}

}  // namespace gpt
