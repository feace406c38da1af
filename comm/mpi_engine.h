// Internal to the MPI backend: the per-process communication thread, its queue and its progress loop.
// Why a thread of our own: the engine overlaps a layer's compute with the next layer's all-gather and with a
// bucket's reduce-scatter, and MPI (MPICH over UCX here) makes no progress on its own: a ring step advances
// only inside an MPI call. A thread that makes the MPI calls gives that progress without the compute code
// ever calling into MPI.
// Why a caller that waits drives progress itself: handing each operation to the thread and its completion
// back costs a wake-up and a sleep on each side; with several ranks per core those context switches (kernel
// work) were most of an MPI test's time. So whoever makes MPI calls holds the progress token (one at a
// time: MPI_THREAD_SERIALIZED is enough), a caller blocked in Request::wait takes it and polls until its
// operation is done (or until the wait turns out long: then it hands back), and the thread sleeps while
// any caller drives. The thread still progresses what is in flight while the callers compute, which is what
// the overlap needs.
// Why not spin: ranks share two cores with the compute threads, so a polling thread polls a few times, then
// yields, then sleeps with a capped exponential backoff (the thread on a condition variable, so a new
// operation wakes it at once), and the thread sleeps without a timeout when there is nothing in flight. Its
// timer slack is set to 1 us so that the short sleeps are short. Any completed message resets the backoff.
// A poll that took long (over 20 us) copied a fragment of a large message, which completes no request by
// itself: the backoff then restarts at its shortest sleep, so the next fragment is picked up within
// microseconds without a poll (a system call) every microsecond in between.
#pragma once

#include <pthread.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/mpi_op.h"
#include "comm/request.h"

namespace gpt::comm::mpi {

struct EngineOptions {
  size_t max_message_bytes = size_t(1) << 30;
  size_t broadcast_segment_bytes = size_t(1) << 20;
  int spin_polls = 64;
  int yield_polls = 256;  // the defaults are MpiOptions' (mpi_communicator.h says why)
  int max_sleep_us = 1000;
  double progress_timeout_s = 0;  // the watchdog (MpiOptions::comm_timeout_s); 0 = off
};

class Engine final : public ProgressDriver {
 public:
  Engine(const Topology& topology, const EngineOptions& options);
  ~Engine();  // stop()
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Before start(), on the thread that initialized MPI: the group of all ranks over `comm` (a duplicate of
  // MPI_COMM_WORLD, which the engine frees at stop()).
  Group* add_world_group(MPI_Comm comm);
  void start();
  // Runs the operations already queued to completion, stops the thread and frees the groups' communicators.
  // Must precede MPI_Finalize. Later submissions throw std::logic_error.
  void stop();

  // Queues an operation on `group` (thread-safe). make_body builds the coroutine; it runs on the
  // communication thread, after this process's earlier operations on the group.
  // `name` (a literal) names the collective for the watchdog; the thread's OperationLabel is recorded too.
  Request submit(Group& group, Phase phase, const char* name, const std::function<Task(Op&)>& make_body);
  // Creates the subgroup of `parent` with these members (world ranks, validated by the caller, including
  // this rank) on the communication thread, after this process's earlier operations have finished; blocks.
  Group* create_group(Group& parent, const std::vector<int>& world_ranks);

  const Topology& topology() const { return topology_; }
  TrafficMeter& meter() { return meter_; }
  const EngineOptions& options() const { return options_; }
  double thread_cpu_seconds() const;  // the communication thread's; a driving caller's is its own

  // Request::wait's driver (any thread but the communication thread): polls under the progress token,
  // taking over from the communication thread, until ready() holds (true) or its backoff would sleep
  // (false): a wait that long goes back to the thread, which sleeps with a 1 us timer slack and wakes at
  // once for a new operation, and the caller sleeps on the Request.
  bool drive_until(const std::function<bool()>& ready) override;

 private:
  struct Submission {
    Group* group = nullptr;
    std::unique_ptr<Op> op;  // an operation and its completion, or
    std::shared_ptr<Request::State> state;
    std::function<void()> exclusive;  // work that runs alone, once nothing is in flight
  };
  struct Admitted {
    std::unique_ptr<Op> op;
    std::shared_ptr<Request::State> state;
  };
  struct Lane {  // the operations admitted on one group, run one after another in issue order
    Group* group;
    std::deque<Admitted> ops;
    uint32_t next_sequence = 0;
    std::chrono::steady_clock::time_point last_progress{};  // of the front operation
  };

  // The backoff of a thread whose poll advanced nothing: poll again, yield, or sleep for pause().
  class Backoff {
   public:
    enum class Step { kPoll, kYield, kSleep };
    explicit Backoff(const EngineOptions& options) : options_(options) {}
    void reset() { idle_ = 0; }
    // A poll moved a fragment of a large message and completed nothing: the rest arrives at the link's pace,
    // so the next steps are the shortest sleeps (1, 2, 4 us, ...) rather than polls and yields again.
    void streamed() { idle_ = options_.spin_polls + options_.yield_polls; }
    Step next();
    std::chrono::microseconds pause() const;

   private:
    const EngineOptions& options_;
    int idle_ = 0;
  };

  void loop();
  // Under the token: admits what was submitted and advances what is in flight.
  enum class Poll {
    kIdle,       // nothing moved
    kStreamed,   // a fragment of a large message moved (the poll took long), nothing completed
    kCompleted,  // an operation advanced
  };
  Poll poll_once();
  void admit(std::unique_lock<std::mutex>& lock);
  bool progress();
  // The watchdog: aborts the job when the front operation of a lane has not advanced for the timeout.
  void check_stalled(Lane& lane, std::chrono::steady_clock::time_point now);
  void run_exclusive(std::function<void()> work);
  Lane& lane_of(Group* group);

  const Topology topology_;
  const EngineOptions options_;
  TrafficMeter meter_;

  // Lock order: token_, then mutex_.
  std::mutex token_;  // the progress token: held by whichever thread makes MPI calls and touches the lanes
  mutable std::mutex mutex_;
  std::condition_variable wake_;    // the communication thread sleeps on it
  std::deque<Submission> pending_;  // guarded by mutex_
  uint64_t submitted_ = 0;          // guarded by mutex_; lets a backoff sleep notice new work
  bool stopping_ = false;           // guarded by mutex_
  bool running_ = false;            // guarded by mutex_
  int drivers_ = 0;                 // guarded by mutex_: callers in drive_until

  // Under the token (and the starting thread's before start()).
  std::vector<std::unique_ptr<Group>> groups_;
  std::deque<Lane> lanes_;  // a deque: growing it moves no Lane
  // Written under the token (admitting under mutex_ too); read under mutex_ alone by the thread deciding
  // whether to sleep.
  std::atomic<int> in_flight_{0};

  std::thread thread_;
  clockid_t thread_clock_{};
  std::atomic<double> final_cpu_seconds_{0.0};
};

}  // namespace gpt::comm::mpi
