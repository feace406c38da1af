// MFU's denominator (train/peak_flops.h): the CPU formula from given inputs, /proc/cpuinfo's fields from a
// sample, the microarchitecture and datasheet tables, the ranks sharing a GPU, and --peak-tflops's value and
// its one-line error (the flag on gpt_train's command line: options_test).
#include "train/peak_flops.h"

#include <doctest/doctest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "base/user_error.h"

namespace {

using gpt::CpuInfo;
using gpt::CpuPeakInput;
using gpt::DType;

// Two processors of this repository's development machine (a Zen 4 EPYC under a hypervisor), flags trimmed.
constexpr const char* kZen4 = R"(processor	: 0
vendor_id	: AuthenticAMD
cpu family	: 25
model		: 17
model name	: AMD EPYC
cpu MHz		: 2596.140
physical id	: 0
siblings	: 2
core id		: 0
cpu cores	: 2
flags		: fpu sse2 avx fma avx2 avx512f avx512bw

processor	: 1
vendor_id	: AuthenticAMD
cpu family	: 25
model		: 17
model name	: AMD EPYC
cpu MHz		: 2600.500
physical id	: 0
siblings	: 2
core id		: 1
cpu cores	: 2
flags		: fpu sse2 avx fma avx2 avx512f avx512bw
)";

CpuPeakInput zen4_input() {
  CpuPeakInput in;
  in.cpu = gpt::parse_cpuinfo(kZen4);
  in.compiled_vector_bits = 512;
  in.threads_per_rank = 2;
  in.logical_cpus = 2;
  in.ranks_on_machine = 1;
  return in;
}

TEST_CASE("parse_cpuinfo reads the first processor's fields and the highest clock") {
  const CpuInfo cpu = gpt::parse_cpuinfo(kZen4);
  CHECK(cpu.vendor == "AuthenticAMD");
  CHECK(cpu.family == 25);
  CHECK(cpu.model == 17);
  CHECK(cpu.siblings == 2);
  CHECK(cpu.cores == 2);
  CHECK(cpu.max_mhz == doctest::Approx(2600.5));
  CHECK(cpu.flags.count("avx512f") == 1);
  CHECK(cpu.flags.count("avx512vl") == 0);
  const CpuInfo none = gpt::parse_cpuinfo("processor : 0\nBogoMIPS : 50.00\nFeatures : fp asimd\n");
  CHECK(none.vendor.empty());
  CHECK(none.max_mhz == 0);
  CHECK(none.flags.empty());
}

TEST_CASE("the microarchitecture table: Zen 4 has two 256-bit FMA units, unknown CPUs are assumed") {
  const gpt::FmaUnits zen4 = gpt::fma_units_of(gpt::parse_cpuinfo(kZen4));
  CHECK(zen4.units == 2);
  CHECK(zen4.bits == 256);
  CHECK(zen4.source == "AMD Zen 4 (family 25, model 17), 256 bits wide");
  CpuInfo zen5;
  zen5.vendor = "AuthenticAMD", zen5.family = 0x1a, zen5.model = 0x44;
  CHECK(gpt::fma_units_of(zen5).bits == 512);
  CpuInfo arm;
  const gpt::FmaUnits assumed = gpt::fma_units_of(arm);
  CHECK(assumed.units == 2);
  CHECK(assumed.bits == 0);
  CHECK(assumed.source.find("assumed") == 0);
}

TEST_CASE("cpu_peak: cores x FMA units x lanes x 2 x clock, each figure named") {
  CpuPeakInput in = zen4_input();
  in.max_freq_khz = 3700000;
  const gpt::PeakFlops peak = gpt::cpu_peak(in);
  // AVX-512 on 256-bit units: 8 fp32 lanes per FMA per cycle.
  CHECK(peak.flops_per_s == doctest::Approx(2 * 2 * 8 * 2 * 3.7e9));
  CHECK(peak.formula == "2 cores x 2 FMA units x 8 fp32 lanes x 2 x 3.70 GHz = 237 GFLOP/s per rank");
  CHECK(peak.sources ==
        "cores: 2 threads per rank (--threads); FMA units: AMD Zen 4 (family 25, model 17), 256 bits wide; "
        "lanes: avx512f on 256-bit FMA units; clock: cpuinfo_max_freq");
  CHECK(peak.banner_line() == "  MFU peak: " + peak.formula + " (" + peak.sources + ")");

  in.max_freq_khz = 0;  // a virtual machine: /proc/cpuinfo's highest "cpu MHz"
  const gpt::PeakFlops vm = gpt::cpu_peak(in);
  CHECK(vm.flops_per_s == doctest::Approx(2 * 2 * 8 * 2 * 2.6005e9));
  CHECK(vm.sources.find("clock: /proc/cpuinfo cpu MHz") != std::string::npos);

  in.measured_ghz = 2.55;  // a measured clock at or below the stated one changes nothing
  CHECK(gpt::cpu_peak(in).flops_per_s == doctest::Approx(vm.flops_per_s));
  in.measured_ghz = 3.1;  // above it (a hypervisor's nominal clock): the measured clock, named
  const gpt::PeakFlops boost = gpt::cpu_peak(in);
  CHECK(boost.flops_per_s == doctest::Approx(2 * 2 * 8 * 2 * 3.1e9));
  CHECK(boost.sources.find(
            "clock: measured by a chain of dependent adds (best of 20 runs), above the 2.60 GHz of "
            "/proc/cpuinfo cpu MHz") != std::string::npos);
  in.measured_ghz = 0;

  in.compiled_vector_bits = 128;  // a build without AVX: the build's vectors, not the CPU's
  CHECK(gpt::cpu_peak(in).flops_per_s == doctest::Approx(2 * 2 * 4 * 2 * 2.6005e9));
}

TEST_CASE("cpu_peak: the cores are each rank's share of the physical cores when the threads exceed it") {
  CpuPeakInput in = zen4_input();
  in.max_freq_khz = 2e6;
  in.ranks_on_machine = 4;  // 2 cores for 4 ranks of 2 threads each
  gpt::PeakFlops peak = gpt::cpu_peak(in);
  CHECK(peak.flops_per_s == doctest::Approx(0.5 * 2 * 8 * 2 * 2e9));
  CHECK(peak.formula.find("0.5 cores x") == 0);
  CHECK(peak.sources.find("cores: 2 physical cores shared by 4 ranks on this machine, fewer than the 2 "
                          "threads per rank") == 0);
  in.ranks_on_machine = 1;
  in.cpu.siblings = 4;  // SMT: 4 logical CPUs on 2 cores, 4 threads
  in.logical_cpus = 4;
  in.threads_per_rank = 4;
  peak = gpt::cpu_peak(in);
  CHECK(peak.flops_per_s == doctest::Approx(2 * 2 * 8 * 2 * 2e9));
  CHECK(peak.sources.find("(2 CPUs each)") != std::string::npos);
  in.cpu.max_mhz = 0;  // no clock anywhere: no stated peak
  in.max_freq_khz = 0;
  CHECK(gpt::cpu_peak(in).flops_per_s == 0);
}

TEST_CASE("datasheet_peak: dense figures by name and compute capability, for the GEMMs' dtype") {
  CHECK(gpt::datasheet_peak("NVIDIA H100 80GB HBM3", 9, 0, DType::kF32).tflops == 67);
  CHECK(gpt::datasheet_peak("NVIDIA H100 80GB HBM3", 9, 0, DType::kBF16).tflops == 989);
  CHECK(gpt::datasheet_peak("NVIDIA H100 80GB HBM3", 9, 0, DType::kF16).entry == "H100 SXM");
  CHECK(gpt::datasheet_peak("NVIDIA H100 PCIe", 9, 0, DType::kF32).tflops == 51);
  CHECK(gpt::datasheet_peak("NVIDIA H100 PCIe", 9, 0, DType::kBF16).tflops == 756);
  CHECK(gpt::datasheet_peak("NVIDIA H200", 9, 0, DType::kBF16).tflops == 989);
  CHECK(gpt::datasheet_peak("NVIDIA A100-SXM4-80GB", 8, 0, DType::kF32).tflops == 19.5);
  CHECK(gpt::datasheet_peak("NVIDIA A100 80GB PCIe", 8, 0, DType::kBF16).tflops == 312);
  CHECK(gpt::datasheet_peak("NVIDIA H100 80GB HBM3", 8, 0, DType::kF32).tflops == 0);  // not an H100's sm
  CHECK(gpt::datasheet_peak("NVIDIA GeForce RTX 4090", 8, 9, DType::kF32).tflops == 0);
  CHECK(gpt::datasheet_peak("NVIDIA H100 80GB HBM3", 9, 0, DType::kF64).tflops == 0);
}

TEST_CASE("gpu_peak: the datasheet figure divided among the ranks that share the GPU") {
  CHECK(gpt::ranks_sharing_gpu(1, 1, 0) == 1);
  CHECK(gpt::ranks_sharing_gpu(4, 8, 3) == 1);
  CHECK(gpt::ranks_sharing_gpu(4, 1, 0) == 4);
  CHECK(gpt::ranks_sharing_gpu(3, 2, 0) == 2);
  CHECK(gpt::ranks_sharing_gpu(3, 2, 1) == 1);
  const gpt::BackendGpu h100{"NVIDIA H100 80GB HBM3", 9, 0, 0, 1};
  gpt::PeakFlops peak = gpt::gpu_peak(h100, DType::kF32, 1);
  CHECK(peak.flops_per_s == doctest::Approx(67e12));
  CHECK(peak.formula == "NVIDIA H100 80GB HBM3 fp32 dense 67 TFLOP/s per rank");
  CHECK(peak.sources ==
        "datasheet, H100 SXM (sm_90); the GEMMs run in fp32 without TF32 (CUBLAS_COMPUTE_32F)");
  peak = gpt::gpu_peak(h100, DType::kBF16, 2);
  CHECK(peak.flops_per_s == doctest::Approx(494.5e12));
  CHECK(peak.formula ==
        "NVIDIA H100 80GB HBM3 bf16 dense 989 TFLOP/s / 2 ranks sharing the GPU = 494 TFLOP/s per rank");
  CHECK(gpt::gpu_peak({"NVIDIA L4", 8, 9, 0, 1}, DType::kF32, 1).flops_per_s == 0);
}

TEST_CASE(
    "rank_peak_flops: --peak-tflops wins and is named; without a stated peak a measured rate is named") {
  int measured = 0;
  auto measure = [&] {
    ++measured;
    return 1e11;
  };
  const gpt::PeakFlops flag =
      gpt::rank_peak_flops(0.5, gpt::BackendGpu{}, DType::kF32, 2, 1, measure, "Eigen SGEMM");
  CHECK(flag.flops_per_s == doctest::Approx(0.5e12));
  CHECK(flag.banner_line() == "  MFU peak: 500 GFLOP/s per rank (--peak-tflops)");
  CHECK(measured == 0);
  // This machine's CPU: a stated peak whenever /proc/cpuinfo gives a clock, else the measured rate, named.
  const gpt::PeakFlops cpu =
      gpt::rank_peak_flops(0, gpt::BackendGpu{}, DType::kF32, 1, 1, measure, "Eigen SGEMM");
  CHECK(cpu.flops_per_s > 0);
  if (measured == 0) {
    CHECK(cpu.formula.find(" fp32 lanes x 2 x ") != std::string::npos);
  } else {
    CHECK(cpu.formula == "100 GFLOP/s per rank, measured (Eigen SGEMM at start-up)");
    CHECK(cpu.sources.find("no stated peak") == 0);
  }
}

TEST_CASE("parse_peak_tflops takes a positive number and names the fix otherwise") {
  CHECK(gpt::parse_peak_tflops("989") == 989);
  CHECK(gpt::parse_peak_tflops("0.166") == doctest::Approx(0.166));
  for (const char* bad : {"0", "-3", "abc", "67TFLOPS", "inf", ""}) {
    CAPTURE(bad);
    CHECK_THROWS_AS(gpt::parse_peak_tflops(bad), gpt::UsageError);
  }
  try {
    gpt::parse_peak_tflops("fast");
    FAIL("no error");
  } catch (const gpt::UsageError& e) {
    CHECK(std::string(e.what()) ==
          "--peak-tflops 'fast' is not a positive number of TFLOP/s; give the dense peak of the device one "
          "rank "
          "computes on, for example 67 (an H100 SXM in fp32) or 0.166 (two Zen 4 cores at 2.6 GHz)");
  }
}

}  // namespace
