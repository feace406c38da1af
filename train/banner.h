// gpt_train's reports besides the progress line, printed by rank 0: the start-up banner (model, topology,
// batch, optimizer, ZeRO++, expected bytes per step, notes, the memory table, the device, MFU's peak and the
// memory guard's verdict), the memory per rank after the first step, and the peak RSS at the end. Tests grep
// these lines: their text changes only on purpose.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "data/loader.h"
#include "train/memory_guard.h"
#include "train/options.h"
#include "train/peak_flops.h"
#include "zero/engine.h"
#include "zero/parallel_groups.h"

namespace gpt {

// "12.34 MB", "1.20 GB", "512 B": for the banner's and the progress line's bytes.
std::string bytes_text(double bytes);

// What the banner says besides the options and the engine.
struct BannerFacts {
  const data::TrainLoader* loader = nullptr;
  bool has_validation = false;
  std::string device;           // describe_backend()
  std::string transport;        // what the world communicates over: "MPI", "NCCL", ...
  PeakFlops peak;               // MFU's denominator
  MemoryVerdict memory;         // the memory guard's
  std::string validation_note;  // why validation is off, if it is
};
void print_banner(const TrainOptions& o, const ParallelGroups& groups, const ZeroEngine& engine,
                  const BannerFacts& facts);

// After the first step: the engine's table (each state's arena peak) completed with what no arena holds,
// beside every rank's measured peak RSS (peaks, over the host world of topology host) and the GPU's peak
// (device_peak_bytes, 0 on the CPU).
void print_first_step_memory(const TrainOptions& o, const ZeroEngine& engine, int data_parallel_size,
                             const comm::Topology& host, const MemoryVerdict& memory,
                             const std::vector<double>& peaks, size_t device_peak_bytes);

// At the end: every rank's peak RSS against the guard's prediction.
void print_peak_rss(const std::vector<double>& peaks, const MemoryVerdict& memory);

}  // namespace gpt
