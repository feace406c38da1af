// The backend-independent parts of the communication room: waiting on a Request (and metering the wait),
// topologies, and the sum of traffic counts over ranks.
#include "comm/communicator.h"

#include <chrono>
#include <cstring>
#include <string>

#include "comm/request.h"

namespace gpt::comm {

namespace {
thread_local const OperationLabel* innermost_label = nullptr;
}  // namespace

OperationLabel::OperationLabel(std::string text) : text_(std::move(text)), outer_(innermost_label) {
  innermost_label = this;
}

OperationLabel::~OperationLabel() {
  innermost_label = outer_;
}

const std::string& OperationLabel::current() {
  static const std::string none;
  return innermost_label ? innermost_label->text_ : none;
}

namespace {

// Blocks until ready() holds (ready() is called with state's mutex held), driving the backend's progress
// while the wait is short if it can be driven, else (or then) on state's condition variable, and records
// the time blocked in the meter.
template <class Ready>
void block_until(Request::State& state, Ready&& ready) {
  std::unique_lock lock(state.mutex);
  if (ready()) return;
  const auto start = std::chrono::steady_clock::now();
  lock.unlock();
  const bool driven = state.driver && state.driver->drive_until([&] {
    std::lock_guard guard(state.mutex);
    return ready();
  });
  if (!driven) {
    lock.lock();
    state.cv.wait(lock, ready);
    lock.unlock();
  }
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (state.meter) state.meter->record_wait(state.phase, ms);
}

void rethrow_failure(Request::State& state) {
  std::exception_ptr error;
  {
    std::lock_guard lock(state.mutex);
    error = state.error;
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace

void Request::wait() {
  if (!state_) return;
  if (!state_->finished.load(std::memory_order_acquire))
    block_until(*state_, [&] { return state_->finished.load(std::memory_order_acquire); });
  rethrow_failure(*state_);
}

void Request::wait_block(int block) {
  if (!state_) return;
  block_until(*state_, [&] { return state_->block_ready(block); });
  rethrow_failure(*state_);
}

bool Request::done() const {
  return !state_ || state_->finished.load(std::memory_order_acquire);
}

std::string Topology::describe() const {
  const int nodes = num_nodes();
  return std::to_string(nodes) + (nodes == 1 ? " node x " : " nodes x ") + std::to_string(ranks_per_node) +
         (ranks_per_node == 1 ? " rank per node" : " ranks per node") + (simulated ? " (simulated)" : "");
}

namespace {

// The divisors of n, for the "use one of" part of the error message.
std::string divisors_of(int n) {
  std::string out;
  for (int d = 1; d <= n; ++d) {
    if (n % d == 0) out += (out.empty() ? "" : ", ") + std::to_string(d);
  }
  return out;
}

}  // namespace

Topology make_topology(int world_size, int world_rank, int ranks_per_node, bool simulated) {
  if (world_size < 1 || world_rank < 0 || world_rank >= world_size) {
    throw std::invalid_argument("make_topology: rank " + std::to_string(world_rank) + " outside a world of " +
                                std::to_string(world_size));
  }
  const std::string setting = simulated ? "--ranks-per-node " : "ranks per node ";
  if (ranks_per_node < 1) {
    throw TopologyError(setting + std::to_string(ranks_per_node) +
                        " is not a positive number of ranks; use " + "one of " + divisors_of(world_size) +
                        " (it must divide the world size " + std::to_string(world_size) + ")");
  }
  if (world_size % ranks_per_node != 0) {
    throw TopologyError(setting + std::to_string(ranks_per_node) + " does not divide the world size " +
                        std::to_string(world_size) + " (mpiexec -n " + std::to_string(world_size) +
                        "); use one of " + divisors_of(world_size) + ", or launch a multiple of " +
                        std::to_string(ranks_per_node) + " ranks");
  }
  Topology topology;
  topology.world_size = world_size;
  topology.world_rank = world_rank;
  topology.ranks_per_node = ranks_per_node;
  topology.simulated = simulated;
  return topology;
}

TrafficCounts sum_over_ranks(Communicator& comm, const TrafficCounts& local) {
  // Fixed-width words on the wire: the byte counts as uint64 and the waits as the bits of a double, all
  // gathered (a 64-bit exact sum is not something a float reduction could give) and added up locally.
  constexpr size_t kWords = kNumPhases * 2 + kNumPhases;
  uint64_t mine[kWords];
  size_t w = 0;
  for (int p = 0; p < kNumPhases; ++p) {
    for (int l = 0; l < 2; ++l) mine[w++] = local.bytes[p][l];
  }
  for (int p = 0; p < kNumPhases; ++p) std::memcpy(&mine[w++], &local.wait_ms[p], sizeof(double));

  std::vector<uint64_t> all(kWords * comm.size());
  comm.all_gather(mine, all.data(), sizeof mine, Phase::kOther).wait();

  TrafficCounts sum;
  for (int r = 0; r < comm.size(); ++r) {
    const uint64_t* words = all.data() + r * kWords;
    w = 0;
    for (int p = 0; p < kNumPhases; ++p) {
      for (int l = 0; l < 2; ++l) sum.bytes[p][l] += words[w++];
    }
    for (int p = 0; p < kNumPhases; ++p) {
      double ms;
      std::memcpy(&ms, &words[w++], sizeof ms);
      sum.wait_ms[p] += ms;
    }
  }
  return sum;
}

}  // namespace gpt::comm
