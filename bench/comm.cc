// bench/comm: bandwidth of our MPI collectives (ring all-gather, ring reduce-scatter, all-reduce) for a few
// sizes, next to MPICH's own MPI_Allgather / MPI_Reduce_scatter_block / MPI_Allreduce measured in the same
// run as a yardstick, and the CPU time our communication costs rank 0 per second of wall time (its
// communication thread's, and its caller's while a short wait drives the progress itself; busy, waiting for
// a late peer, and idle while the caller computes). Run under `mpiexec -n 2` or `-n 4`; rank 0
// prints. Never passes or fails.
//   mpiexec -n 4 bazel-bin/bench/comm [--max-mib 64] [--max-sleep-us 100]
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <functional>
#include <thread>
#include <vector>

#include "base/flags.h"
#include "comm/mpi_main.h"

namespace {

using gpt::DType;
using gpt::comm::Communicator;
using gpt::comm::MpiSession;
using gpt::comm::Phase;
using Clock = std::chrono::steady_clock;

struct Timing {
  double seconds_per_op = 0;
  // The process's CPU seconds per wall second (it does nothing but communicate).
  double comm_cpu_per_wall = 0;
};

// CPU seconds of this whole process: the communication thread and a caller that drives progress while it
// waits (comm/mpi_engine.h).
double process_cpu_seconds() {
  timespec now{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
  return double(now.tv_sec) + 1e-9 * double(now.tv_nsec);
}

// The machine is shared (two cores, other work): each measurement is the fastest of kRepeats loops.
constexpr int kRepeats = 3;

// Runs op `iterations` times after one warm-up, between barriers; times rank 0's view of the whole loop.
Timing time_op(Communicator& world, int iterations, const std::function<void()>& op) {
  op();
  Timing best{1e30, 0};
  for (int repeat = 0; repeat < kRepeats; ++repeat) {
    world.barrier().wait();
    const double cpu0 = process_cpu_seconds();
    const auto start = Clock::now();
    for (int i = 0; i < iterations; ++i) op();
    world.barrier().wait();
    const double wall = std::chrono::duration<double>(Clock::now() - start).count();
    if (wall / iterations < best.seconds_per_op) {
      best = Timing{wall / iterations, (process_cpu_seconds() - cpu0) / wall};
    }
  }
  return best;
}

// The same for MPICH's collectives, called on this thread while our communication thread is idle.
double time_mpich(int iterations, const std::function<void()>& op) {
  op();
  double best = 1e30;
  for (int repeat = 0; repeat < kRepeats; ++repeat) {
    MPI_Barrier(MPI_COMM_WORLD);
    const auto start = Clock::now();
    for (int i = 0; i < iterations; ++i) op();
    MPI_Barrier(MPI_COMM_WORLD);
    best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count() / iterations);
  }
  return best;
}

int iterations_for(size_t bytes) {
  return int(std::clamp<size_t>((size_t(128) << 20) / std::max<size_t>(bytes, 1), 3, 200));
}

// Returns false when --help was printed.
bool parse(int argc, char** argv, gpt::comm::MpiOptions& options, int64_t& max_mib) {
  gpt::FlagParser flags(
      "bench/comm",
      "Bandwidth of our MPI collectives beside MPICH's, and the communication thread's CPU; "
      "run under mpiexec -n 2 or -n 4.");
  flags.add_int64("--max-mib", &max_mib, "largest buffer in MiB (sizes from 64 KiB, x8)", 1, 1 << 20);
  flags.add_int("--max-sleep-us", &options.max_sleep_us, "the communication thread's backoff cap", 0,
                1 << 24);
  flags.add_int("--ranks-per-node", &options.ranks_per_node,
                "simulate nodes of K consecutive ranks (0 = real nodes)", 0, 1 << 20);
  return flags.parse(argc, argv);
}

int run(MpiSession& session, int argc, char** argv) {
  gpt::comm::MpiOptions options;
  int64_t max_mib = 64;
  if (!parse(argc, argv, options, max_mib)) return 0;
  auto world = session.world(options);
  const int w = world->size();
  int thread_level = 0;
  MPI_Query_thread(&thread_level);
  // MPICH's collectives run on this thread beside our communication thread only with MPI_THREAD_MULTIPLE
  // (and only while ours is idle, between our timed loops).
  const bool yardstick = thread_level == MPI_THREAD_MULTIPLE;
  const bool print = world->rank() == 0;
  if (print) {
    std::printf(
        "bench/comm: %d ranks, %s, backoff cap %d us; GB/s = bytes of the full buffer / time; "
        "bus GB/s scales by (W-1)/W (2(W-1)/W for all-reduce); cpu = rank 0's CPU s per wall s\n",
        w, world->topology().describe().c_str(), options.max_sleep_us);
    std::printf("%-15s %10s %10s %9s %9s %6s %12s\n", "op", "bytes", "ms", "GB/s", "bus GB/s", "cpu",
                "MPICH GB/s");
  }

  for (size_t bytes = size_t(64) << 10; bytes <= (size_t(max_mib) << 20); bytes *= 8) {
    const size_t total = bytes / (4 * w) * (4 * w);  // divisible into W fp16 chunks and fp32 ints
    const int iterations = iterations_for(total);
    std::vector<uint8_t> full(total), part(total / w);
    std::vector<uint16_t> halves(total / 2, 0x3c00);
    std::vector<float> shard(total / 2 / w), floats(total / 4, 1.0f), floats_out(total / 4 / w);

    struct Row {
      const char* name;
      double bus_factor;
      std::function<void()> ours, mpich;
    };
    const Row rows[] = {
        {"all_gather", double(w - 1) / w,
         [&] { world->all_gather(part.data(), full.data(), total / w, Phase::kParamGatherFwd).wait(); },
         [&] {
           MPI_Allgather(part.data(), int(total / w), MPI_BYTE, full.data(), int(total / w), MPI_BYTE,
                         MPI_COMM_WORLD);
         }},
        {"reduce_scatter", double(w - 1) / w,
         [&] {
           world
               ->reduce_scatter(halves.data(), DType::kF16, shard.data(), total / 2 / w, 1.0f / w,
                                Phase::kGradReduce)
               .wait();
         },
         // MPICH has no fp16 sum: its fp32 reduce-scatter of the same number of bytes is the yardstick.
         [&] {
           MPI_Reduce_scatter_block(floats.data(), floats_out.data(), int(total / 4 / w), MPI_FLOAT, MPI_SUM,
                                    MPI_COMM_WORLD);
         }},
        {"all_reduce", 2.0 * (w - 1) / w,
         [&] { world->all_reduce(halves.data(), DType::kF16, total / 2, 1.0f, Phase::kGradReduce).wait(); },
         [&] {
           MPI_Allreduce(MPI_IN_PLACE, floats.data(), int(total / 4), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
         }},
    };
    for (const Row& row : rows) {
      const Timing ours = time_op(*world, iterations, row.ours);
      double mpich_gbs = NAN;
      if (yardstick) mpich_gbs = total / time_mpich(iterations, row.mpich) / 1e9;
      if (print) {
        const double gbs = total / ours.seconds_per_op / 1e9;
        std::printf("%-15s %10zu %10.3f %9.3f %9.3f %5.0f%% %12.3f\n", row.name, total,
                    1e3 * ours.seconds_per_op, gbs, gbs * row.bus_factor, 100 * ours.comm_cpu_per_wall,
                    mpich_gbs);
      }
    }
  }

  // Rank 0's CPU while its caller waits 200 ms on an all-gather for a late peer (the last rank; the caller
  // drives through its spins and yields, then hands back to the thread), and while nothing at all is in
  // flight: what the backoff leaves to the compute threads.
  std::vector<uint8_t> part(1 << 20), full((1 << 20) * w);
  world->barrier().wait();
  double cpu0 = process_cpu_seconds();
  auto start = Clock::now();
  if (w > 1 && world->rank() == w - 1) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  world->all_gather(part.data(), full.data(), part.size(), Phase::kParamGatherFwd).wait();
  const double waiting =
      (process_cpu_seconds() - cpu0) / std::chrono::duration<double>(Clock::now() - start).count();
  cpu0 = process_cpu_seconds();
  start = Clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const double idle =
      (process_cpu_seconds() - cpu0) / std::chrono::duration<double>(Clock::now() - start).count();
  world->barrier().wait();
  if (print) {
    std::printf(
        "cpu of rank 0: %.1f%% while a gather waits 200 ms for a late peer, %.2f%% with "
        "nothing in flight\n",
        100 * waiting, 100 * idle);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return gpt::comm::run_mpi_main("bench/comm", argc, argv,
                                 [&](MpiSession& session) { return run(session, argc, argv); });
}
