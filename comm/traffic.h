// The traffic meter: payload bytes that one rank hands to the transport for another rank, by phase of the
// training step and by link class (intra-node or inter-node, decided by the destination's node), plus the
// time callers spent blocked waiting for communication, by phase.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <string>

namespace gpt::comm {

// The tensor-parallel phases: the layers' collectives in the forward (tp_fwd) and in the backward, with the
// recomputation's (tp_bwd), and partitioned activation checkpoints gathered for the recomputation.
enum class Phase : uint8_t {
  kParamGatherFwd,
  kParamGatherBwd,
  kGradReduce,
  kTpFwd,
  kTpBwd,
  kActGather,
  kPpP2p,  // pipeline stages' activations and their gradients, point to point
  kEval,
  kOther
};
inline constexpr int kNumPhases = 9;
// "param_gather_fwd", "param_gather_bwd", "grad_reduce", "tp_fwd", "tp_bwd", "act_gather", "pp_p2p", "eval",
// "other" (the metrics file's names).
const char* phase_name(Phase phase);

enum class Link : uint8_t { kIntraNode, kInterNode };
const char* link_name(Link link);  // "intra", "inter" (the metrics file's names)

struct TrafficCounts {
  std::array<std::array<uint64_t, 2>, kNumPhases> bytes{};  // [phase][link]
  std::array<double, kNumPhases> wait_ms{};

  uint64_t total(Link link) const;  // over all phases
  uint64_t total() const;           // over all phases and both links
  uint64_t at(Phase phase, Link link) const { return bytes[int(phase)][int(link)]; }
  uint64_t at(Phase phase) const { return at(phase, Link::kIntraNode) + at(phase, Link::kInterNode); }

  // Element-wise over bytes and wait_ms: the counts of one step are `after - before` of two snapshots.
  TrafficCounts& operator+=(const TrafficCounts& other);
  TrafficCounts& operator-=(const TrafficCounts& other);
  friend TrafficCounts operator+(TrafficCounts a, const TrafficCounts& b) { return a += b; }
  friend TrafficCounts operator-(TrafficCounts a, const TrafficCounts& b) { return a -= b; }
  bool operator==(const TrafficCounts&) const = default;

  // One line for logs and test failures: "param_gather_fwd intra=.. inter=.. wait=..ms | ...".
  std::string describe() const;
};

// Counts for one rank. Thread-safe: the backend records sends from its communication thread while caller
// threads record their waits and take snapshots. Read after the operations of interest have been waited for
// (a send is recorded when it is handed to the transport, so an operation still in flight may be partly
// counted). Not copyable; a communicator and all its subgroups share their process's meter.
class TrafficMeter {
 public:
  TrafficMeter() = default;
  TrafficMeter(const TrafficMeter&) = delete;
  TrafficMeter& operator=(const TrafficMeter&) = delete;

  void record_send(Phase phase, Link link, uint64_t bytes);
  void record_wait(Phase phase, double ms);
  TrafficCounts snapshot() const;
  void reset();

 private:
  mutable std::mutex mutex_;  // records are rare (one per message or wait), so a plain mutex costs nothing
  TrafficCounts counts_;
};

}  // namespace gpt::comm
