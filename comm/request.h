// The completion object behind a Request, shared by every backend: the backend's progress engine signals
// complete() once, from any thread, and an all-gather's backend may report each block as it arrives before
// that; callers block in Request::wait() and wait_block() on a condition variable (no spinning, so a
// waiting caller costs no CPU on a machine where ranks share cores).
#pragma once

#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <vector>

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

  // Block `block` of an all-gather's output is final (Request::wait_block); any thread, before complete().
  void block_arrived(int block) {
    {
      std::lock_guard lock(mutex);
      if (arrived.size() <= size_t(block)) arrived.resize(size_t(block) + 1, false);
      arrived[size_t(block)] = true;
    }
    cv.notify_all();
  }
  // Under the mutex: block `block` may be read (it arrived, or the whole operation is over).
  bool block_ready(int block) const {
    return finished.load(std::memory_order_acquire) ||
           (size_t(block) < arrived.size() && arrived[size_t(block)]);
  }

  TrafficMeter* const meter;  // where wait() records the time it blocked; may be null
  const Phase phase;
  std::mutex mutex;
  std::condition_variable cv;
  std::atomic<bool> finished{false};
  std::exception_ptr error;   // written before `finished` under the mutex
  std::vector<bool> arrived;  // the blocks reported so far, under the mutex
};

}  // namespace gpt::comm
