// The traffic meter and the arithmetic on its counts.
#include "comm/traffic.h"

#include <cstdio>

namespace gpt::comm {

const char* phase_name(Phase phase) {
  switch (phase) {
    case Phase::kParamGatherFwd:
      return "param_gather_fwd";
    case Phase::kParamGatherBwd:
      return "param_gather_bwd";
    case Phase::kGradReduce:
      return "grad_reduce";
    case Phase::kTpFwd:
      return "tp_fwd";
    case Phase::kTpBwd:
      return "tp_bwd";
    case Phase::kActGather:
      return "act_gather";
    case Phase::kPpP2p:
      return "pp_p2p";
    case Phase::kEval:
      return "eval";
    case Phase::kOther:
      return "other";
  }
  return "unknown";
}

const char* link_name(Link link) {
  return link == Link::kIntraNode ? "intra" : "inter";
}

uint64_t TrafficCounts::total(Link link) const {
  uint64_t sum = 0;
  for (const auto& by_link : bytes) sum += by_link[int(link)];
  return sum;
}

uint64_t TrafficCounts::total() const {
  return total(Link::kIntraNode) + total(Link::kInterNode);
}

TrafficCounts& TrafficCounts::operator+=(const TrafficCounts& other) {
  for (int p = 0; p < kNumPhases; ++p) {
    for (int l = 0; l < 2; ++l) bytes[p][l] += other.bytes[p][l];
    wait_ms[p] += other.wait_ms[p];
  }
  return *this;
}

TrafficCounts& TrafficCounts::operator-=(const TrafficCounts& other) {
  for (int p = 0; p < kNumPhases; ++p) {
    for (int l = 0; l < 2; ++l) bytes[p][l] -= other.bytes[p][l];
    wait_ms[p] -= other.wait_ms[p];
  }
  return *this;
}

std::string TrafficCounts::describe() const {
  std::string out;
  for (int p = 0; p < kNumPhases; ++p) {
    char line[160];
    std::snprintf(line, sizeof line, "%s%s intra=%llu inter=%llu wait=%.3fms", p ? " | " : "",
                  phase_name(Phase(p)), static_cast<unsigned long long>(bytes[p][0]),
                  static_cast<unsigned long long>(bytes[p][1]), wait_ms[p]);
    out += line;
  }
  return out;
}

void TrafficMeter::record_send(Phase phase, Link link, uint64_t bytes) {
  std::lock_guard lock(mutex_);
  counts_.bytes[int(phase)][int(link)] += bytes;
}

void TrafficMeter::record_wait(Phase phase, double ms) {
  std::lock_guard lock(mutex_);
  counts_.wait_ms[int(phase)] += ms;
}

TrafficCounts TrafficMeter::snapshot() const {
  std::lock_guard lock(mutex_);
  return counts_;
}

void TrafficMeter::reset() {
  std::lock_guard lock(mutex_);
  counts_ = TrafficCounts{};
}

}  // namespace gpt::comm
