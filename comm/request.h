// The completion object behind a Request, shared by every backend: the backend's progress engine signals
// complete() once, from any thread; callers block in Request::wait() on a condition variable (no spinning,
// so a waiting caller costs no CPU on a machine where ranks share cores).
#pragma once

#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>

#include "comm/communicator.h"

namespace gpt::comm {

struct Request::State {
  State(TrafficMeter* meter, Phase phase) : meter(meter), phase(phase) {}

  // Marks the operation finished; `failure` is rethrown by every wait(). Call exactly once.
  void complete(std::exception_ptr failure = nullptr) {
    {
      std::lock_guard lock(mutex);
      error = std::move(failure);
      finished.store(true, std::memory_order_release);
    }
    cv.notify_all();
  }

  TrafficMeter* const meter;  // where wait() records the time it blocked; may be null
  const Phase phase;
  std::mutex mutex;
  std::condition_variable cv;
  std::atomic<bool> finished{false};
  std::exception_ptr error;  // written before `finished` under the mutex
};

}  // namespace gpt::comm
