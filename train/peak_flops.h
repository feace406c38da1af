// MFU's denominator: the peak dense FLOP rate of what one rank computes on, stated with where each figure
// came from. On the CPU: the cores the rank computes on x FMA units per core x fp32 lanes x 2 flops x clock
// (cpufreq's maximum or /proc/cpuinfo's, raised to the clock a dependent-add chain measures when that is
// higher); on a GPU: the datasheet's dense peak for the dtype its GEMMs run in, shared by the ranks on that
// GPU; or --peak-tflops. A GEMM rate measured at start-up stands in only where no peak can be stated, and
// says so: a measured rate is the machine's share under whatever else runs, so MFU against it could pass
// 100%.
#pragma once

#include <functional>
#include <set>
#include <string>

#include "kernels/backend_gpu.h"
#include "tensor/tensor.h"

namespace gpt {

struct PeakFlops {
  double flops_per_s = 0;  // per rank
  std::string formula;     // "2 cores x 2 FMA units x 8 fp32 lanes x 2 x 2.60 GHz = 166 GFLOP/s per rank"
  std::string sources;     // where each figure came from: "cores: ...; FMA units: ...; ..."
  // The banner's line: "  MFU peak: <formula> (<sources>)".
  std::string banner_line() const;
};

// "166 GFLOP/s", "67 TFLOP/s", "33.5 TFLOP/s": three significant digits.
std::string flops_text(double flops_per_s);

// What /proc/cpuinfo says about this machine's processors (x86 fields; other architectures leave them empty).
struct CpuInfo {
  std::string vendor;  // vendor_id: "AuthenticAMD", "GenuineIntel"
  int family = -1, model = -1;
  std::set<std::string> flags;  // the first processor's: "avx512f", "avx2", "fma", ...
  int siblings = 0, cores = 0;  // per package: logical CPUs ("siblings") and physical cores ("cpu cores")
  double max_mhz = 0;           // the highest "cpu MHz" over the processors
};
CpuInfo parse_cpuinfo(const std::string& text);

// FMA units per core and their width in bits, from a small table of microarchitectures (or an assumption,
// named as such in `source`).
struct FmaUnits {
  int units = 2;
  int bits = 0;  // 0: as wide as the vector ISA
  std::string source;
};
FmaUnits fma_units_of(const CpuInfo& cpu);

struct CpuPeakInput {
  CpuInfo cpu;
  int compiled_vector_bits = 128;  // the widest float vectors this build's GEMM uses (compiled_vector_bits())
  double max_freq_khz = 0;         // cpufreq's cpuinfo_max_freq; 0 when absent (virtual machines)
  double measured_ghz = 0;         // the clock measured at start-up; 0 when not measured
  int threads_per_rank = 1;        // the CPU kernels' threads (OpenMP and Eigen's GEMM)
  int logical_cpus = 1;            // the CPUs this process may run on (its affinity mask)
  int ranks_on_machine = 1;        // the ranks sharing those CPUs
};
// The clock is the highest of cpuinfo_max_freq (or else /proc/cpuinfo's cpu MHz) and the measured one.
// flops_per_s is 0 when the clock is unknown.
PeakFlops cpu_peak(const CpuPeakInput& in);

// The compiler's target for this build: 512 with AVX-512F, 256 with AVX, else 128 (SSE, NEON).
int compiled_vector_bits();

// A GPU's dense datasheet peak in TFLOP/s for GEMMs in `gemm_dtype` (fp32: true fp32, as the CUDA backend's
// GEMMs run, CUBLAS_COMPUTE_32F without TF32; fp16 and bf16: tensor cores); tflops is 0 for a GPU or dtype
// the table lacks. entry names the datasheet row ("H100 SXM").
struct DatasheetPeak {
  double tflops = 0;
  std::string entry;
};
DatasheetPeak datasheet_peak(const std::string& name, int major, int minor, DType gemm_dtype);

// How many of the ranks on a machine drive GPU `index`: rank r uses GPU r mod gpus (kernels/backend.h).
int ranks_sharing_gpu(int ranks_on_machine, int gpus, int index);

// The datasheet peak of the GPU per rank; flops_per_s is 0 when the table lacks it.
PeakFlops gpu_peak(const BackendGpu& gpu, DType gemm_dtype, int ranks_on_machine);

// --peak-tflops: a positive, finite number of TFLOP/s. Throws UsageError naming the value and the fix.
double parse_peak_tflops(const std::string& text);

// The peak this rank's MFU divides by: --peak-tflops when peak_tflops > 0, else the stated peak of the
// rank's GPU (kernels/backend.h's backend_gpu(); an empty name: the CPU, read from /proc/cpuinfo and sysfs);
// where none can be stated, measure_flops (a GEMM rate measured now, described by measured_what) stands in
// and the sources say so.
PeakFlops rank_peak_flops(double peak_tflops, const BackendGpu& gpu, DType gemm_dtype, int threads_per_rank,
                          int ranks_on_machine, const std::function<double()>& measure_flops,
                          const std::string& measured_what);

}  // namespace gpt
