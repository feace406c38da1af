// An optional log of what the engine posts and computes, in order, so tests can check the schedule (that a
// prefetch is posted before the compute it should overlap) without timing anything.
#pragma once

#include <string>
#include <vector>

namespace gpt {

struct EngineEvent {
  enum class Kind { kPostGather, kWaitGather, kComputeBegin, kPostReduce, kWaitReduce };
  Kind kind;
  std::string what;  // unit name ("h.3") or bucket ("bucket 2: h.11..h.9")
  bool backward = false;
};

class EventLog {
 public:
  explicit EventLog(bool enabled) : enabled_(enabled) {}
  void add(EngineEvent::Kind kind, std::string what, bool backward) {
    if (enabled_) events_.push_back({kind, std::move(what), backward});
  }
  const std::vector<EngineEvent>& events() const { return events_; }
  void clear() { events_.clear(); }

 private:
  bool enabled_;
  std::vector<EngineEvent> events_;
};

}  // namespace gpt
