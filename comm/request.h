// The completion object behind a Request, shared by every backend: the backend's progress engine signals
// complete() once, from any thread, and an all-gather's backend may report each block as it arrives before
// that. A caller blocks in Request::wait() and wait_block() on a condition variable (no spinning, so a
// waiting caller costs no CPU on a machine where ranks share cores), unless the backend can be driven: then
// the waiting thread first makes the backend's progress itself, while the wait is short (ProgressDriver).
#pragma once

#include <atomic>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <vector>

#include "comm/communicator.h"

namespace gpt::comm {

// A backend whose progress a waiting caller can make itself (the MPI engine: comm/mpi_engine.h says why).
class ProgressDriver {
 public:
  // Makes progress on the calling thread until ready() holds (true), or until the wait looks long (false:
  // the backend's own thread has the progress back, and the caller waits on the condition variable).
  // ready() takes the State's mutex, so the driver must call it with none of its own locks held that
  // complete() or block_arrived() could need.
  virtual bool drive_until(const std::function<bool()>& ready) = 0;

 protected:
  ~ProgressDriver() = default;
};

struct Request::State {
  State(TrafficMeter* meter, Phase phase, ProgressDriver* driver = nullptr)
      : meter(meter), phase(phase), driver(driver) {}

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
  ProgressDriver* const driver;  // null: wait on cv
  std::mutex mutex;
  std::condition_variable cv;
  std::atomic<bool> finished{false};
  std::exception_ptr error;   // written before `finished` under the mutex
  std::vector<bool> arrived;  // the blocks reported so far, under the mutex
};

}  // namespace gpt::comm
