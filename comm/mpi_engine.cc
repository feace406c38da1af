// The communication thread of the MPI backend (see mpi_engine.h for the design and its reasons).
#include "comm/mpi_engine.h"

#include <sched.h>
#include <sys/prctl.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <future>
#include <stdexcept>

#include "comm/mpi_communicator.h"
#include "comm/request.h"

namespace gpt::comm::mpi {
namespace {

std::unique_ptr<Group> make_group(MPI_Comm comm, std::vector<int> world_ranks, const Topology& topology) {
  auto group = std::make_unique<Group>();
  group->comm = comm;
  MPI_Comm_rank(comm, &group->rank);
  MPI_Comm_size(comm, &group->size);
  group->world_ranks = std::move(world_ranks);
  for (int world_rank : group->world_ranks) {
    group->link_to.push_back(topology.node_of(world_rank) == topology.node() ? Link::kIntraNode
                                                                             : Link::kInterNode);
  }
  return group;
}

// An MPI_Testall that finds nothing to do returns in about a microsecond.
constexpr auto kBusyPoll = std::chrono::microseconds(20);

double seconds_of(clockid_t clock) {
  timespec now{};
  if (clock_gettime(clock, &now) != 0) return 0.0;
  return double(now.tv_sec) + 1e-9 * double(now.tv_nsec);
}

}  // namespace

Engine::Engine(const Topology& topology, const EngineOptions& options)
    : topology_(topology), options_(options) {}

Engine::~Engine() {
  stop();
}

Group* Engine::add_world_group(MPI_Comm comm) {
  std::vector<int> world_ranks(topology_.world_size);
  for (int r = 0; r < topology_.world_size; ++r) world_ranks[r] = r;
  groups_.push_back(make_group(comm, std::move(world_ranks), topology_));
  lanes_.push_back(Lane{groups_.back().get()});
  return groups_.back().get();
}

void Engine::start() {
  {
    std::lock_guard lock(mutex_);
    running_ = true;
  }
  thread_ = std::thread([this] { loop(); });
  if (pthread_getcpuclockid(thread_.native_handle(), &thread_clock_) != 0) thread_clock_ = clockid_t{};
}

void Engine::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) {
    thread_.join();  // the thread frees the groups' communicators on its way out
  } else {
    lanes_.clear();
    for (auto& group : groups_) MPI_Comm_free(&group->comm);  // never started: this thread owns MPI
    groups_.clear();
  }
  std::lock_guard lock(mutex_);
  running_ = false;
}

double Engine::thread_cpu_seconds() const {
  std::lock_guard lock(mutex_);
  return running_ && thread_.joinable() ? seconds_of(thread_clock_) : final_cpu_seconds_.load();
}

Request Engine::submit(Group& group, Phase phase, const char* name,
                       const std::function<Task(Op&)>& make_body) {
  auto state = std::make_shared<Request::State>(&meter_, phase, this);
  auto op =
      std::make_unique<Op>(group, phase, meter_, options_.max_message_bytes, name, OperationLabel::current());
  op->set_body(make_body(*op));
  op->set_completion(state.get());
  {
    std::lock_guard lock(mutex_);
    if (!running_ || stopping_) throw std::logic_error("comm: operation issued after the MPI session ended");
    pending_.push_back(Submission{&group, std::move(op), state, {}});
    ++submitted_;
    if (drivers_ > 0) return Request(std::move(state));  // a driving caller admits it (no wake-up)
  }
  wake_.notify_one();
  return Request(std::move(state));
}

void Engine::run_exclusive(std::function<void()> work) {
  std::promise<void> done;
  auto finished = done.get_future();
  {
    std::lock_guard lock(mutex_);
    if (!running_ || stopping_)
      throw std::logic_error("comm: subgroup requested after the MPI session ended");
    pending_.push_back(Submission{nullptr, nullptr, nullptr, [&] {
                                    try {
                                      work();
                                      done.set_value();
                                    } catch (...) {
                                      done.set_exception(std::current_exception());
                                    }
                                  }});
    ++submitted_;
  }
  wake_.notify_one();
  finished.get();
}

Group* Engine::create_group(Group& parent, const std::vector<int>& world_ranks) {
  Group* created = nullptr;
  run_exclusive([&] {
    std::vector<int> parent_ranks;
    for (int world_rank : world_ranks) {
      const auto at = std::find(parent.world_ranks.begin(), parent.world_ranks.end(), world_rank);
      parent_ranks.push_back(static_cast<int>(at - parent.world_ranks.begin()));
    }
    MPI_Group parent_group, members;
    MPI_Comm_group(parent.comm, &parent_group);
    MPI_Group_incl(parent_group, static_cast<int>(parent_ranks.size()), parent_ranks.data(), &members);
    MPI_Comm comm = MPI_COMM_NULL;
    // Only the members take part, so groups that partition the ranks are built without involving the rest.
    MPI_Comm_create_group(parent.comm, members, /*tag=*/0, &comm);
    MPI_Group_free(&members);
    MPI_Group_free(&parent_group);

    // Setup check, once per subgroup and before any training: every member listed the same ranks in the same
    // order. MPI's own all-reduce of two words is fine here: it is not part of any metered operation.
    uint64_t hash = 1469598103934665603ull;
    for (int world_rank : world_ranks) hash = (hash ^ uint64_t(world_rank)) * 1099511628211ull;
    uint64_t mine[2] = {hash, ~hash}, most[2] = {0, 0};
    MPI_Allreduce(mine, most, 2, MPI_UINT64_T, MPI_MAX, comm);
    if (most[0] != mine[0] || most[1] != mine[1]) {
      MPI_Comm_free(&comm);
      throw std::invalid_argument("comm: subgroup members passed different rank lists");
    }
    groups_.push_back(make_group(comm, world_ranks, topology_));
    lanes_.push_back(Lane{groups_.back().get()});
    created = groups_.back().get();
  });
  return created;
}

Engine::Lane& Engine::lane_of(Group* group) {
  for (Lane& lane : lanes_) {
    if (lane.group == group) return lane;
  }
  throw std::logic_error("comm: operation on a group this engine does not own");
}

void Engine::admit(std::unique_lock<std::mutex>& lock) {
  while (!pending_.empty()) {
    Submission& next = pending_.front();
    if (next.exclusive) {
      if (in_flight_ > 0) return;  // later submissions wait behind it, keeping the issue order
      auto work = std::move(next.exclusive);
      pending_.pop_front();
      lock.unlock();
      work();
      lock.lock();
      continue;
    }
    Lane& lane = lane_of(next.group);
    if (lane.ops.empty()) lane.last_progress = std::chrono::steady_clock::now();  // it becomes the front
    next.op->set_sequence(lane.next_sequence++);
    lane.ops.push_back(Admitted{std::move(next.op), std::move(next.state)});
    ++in_flight_;
    pending_.pop_front();
  }
}

bool Engine::progress() {
  bool advanced = false;
  const auto now = std::chrono::steady_clock::now();
  for (Lane& lane : lanes_) {
    while (!lane.ops.empty()) {
      Admitted& front = lane.ops.front();
      if (!front.op->advance()) {
        check_stalled(lane, now);
        break;
      }
      advanced = true;
      lane.last_progress = now;
      if (!front.op->finished()) break;
      if (std::exception_ptr error = front.op->error()) {
        // Messages of the operation may still be in flight into or out of freed memory, and the peers wait
        // for the rest of it: nothing sensible remains but to end the job, loudly.
        try {
          std::rethrow_exception(error);
        } catch (const std::exception& e) {
          std::fprintf(stderr, "comm: rank %d: a collective failed on the communication thread: %s\n",
                       topology_.world_rank, e.what());
        }
        abort_job(70);
      }
      front.state->complete();
      lane.ops.pop_front();
      --in_flight_;
    }
  }
  return advanced;
}

void Engine::check_stalled(Lane& lane, std::chrono::steady_clock::time_point now) {
  const double timeout = options_.progress_timeout_s;
  if (timeout <= 0 || now - lane.last_progress < std::chrono::duration<double>(timeout)) return;
  // A peer stopped (stuck in I/O, dead without a signal, deadlocked) and would leave every rank waiting
  // forever: say which operation waits for whom, and end the job.
  std::fprintf(
      stderr,
      "comm: rank %d: no progress for %.0f s in %s; aborting the job (--comm-timeout %.0f; raise it if "
      "a step can legitimately take longer)\n",
      topology_.world_rank, timeout, lane.ops.front().op->describe_wait().c_str(), timeout);
  abort_job(3);
}

Engine::Backoff::Step Engine::Backoff::next() {
  ++idle_;
  if (idle_ <= options_.spin_polls) return Step::kPoll;
  if (idle_ <= options_.spin_polls + options_.yield_polls) return Step::kYield;
  return Step::kSleep;
}

std::chrono::microseconds Engine::Backoff::pause() const {
  const int doublings = std::min(idle_ - options_.spin_polls - options_.yield_polls - 1, 20);
  return std::chrono::microseconds(std::min<long>(1L << std::max(doublings, 0), options_.max_sleep_us));
}

Engine::Poll Engine::poll_once() {
  {
    std::unique_lock lock(mutex_);
    admit(lock);
  }
  // A large message moves in fragments, each copied inside some MPI_Test call, and no request completes
  // until the last one: a poll that took long moved a fragment. The backoff then sleeps briefly rather
  // than sleeping ever longer (measured: 2-3x slower 32 MB reductions when fragments waited for the long
  // sleeps) or polling and yielding hard until the next fragment (every poll is a system call; on the
  // emulated cluster that polling was 17% of a ZeRO++ step's CPU).
  const auto poll_start = std::chrono::steady_clock::now();
  if (progress()) return Poll::kCompleted;
  return std::chrono::steady_clock::now() - poll_start > kBusyPoll ? Poll::kStreamed : Poll::kIdle;
}

bool Engine::drive_until(const std::function<bool()>& ready) {
  {
    std::lock_guard lock(mutex_);
    ++drivers_;
  }
  // The thread resumes when the last driver leaves with work in flight or queued (also when ready() throws).
  struct Leave {
    Engine& engine;
    ~Leave() {
      std::unique_lock lock(engine.mutex_);
      const bool hand_over = --engine.drivers_ == 0 && (engine.in_flight_ > 0 || !engine.pending_.empty());
      lock.unlock();
      if (hand_over) engine.wake_.notify_one();
    }
  } leave{*this};
  Backoff backoff(options_);
  while (!ready()) {
    std::unique_lock token(token_, std::try_to_lock);  // the thread may be finishing a poll
    const Poll poll = token ? poll_once() : Poll::kIdle;
    if (poll == Poll::kCompleted) {
      backoff.reset();
      continue;
    }
    if (poll == Poll::kStreamed) backoff.streamed();
    if (token) token.unlock();
    switch (backoff.next()) {
      case Backoff::Step::kPoll:
        break;
      case Backoff::Step::kYield:
        sched_yield();
        break;
      case Backoff::Step::kSleep:
        return false;  // a peer is late or a link slow: the thread's sleeps suit that better (header)
    }
  }
  return true;
}

void Engine::loop() {
  prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);  // nanoseconds: keep the backoff sleeps as asked
  Backoff backoff(options_);
  std::unique_lock lock(mutex_);
  for (;;) {
    // Asleep while a caller drives progress or while there is nothing to do.
    if (drivers_ > 0 || (in_flight_ == 0 && pending_.empty())) {
      if (stopping_ && drivers_ == 0) break;
      wake_.wait(lock, [&] { return drivers_ == 0 && (stopping_ || in_flight_ > 0 || !pending_.empty()); });
      backoff.reset();
      continue;
    }
    const uint64_t seen = submitted_;
    lock.unlock();
    Poll poll;
    {
      std::lock_guard token(token_);
      poll = poll_once();
    }
    if (poll == Poll::kCompleted) {
      backoff.reset();
      lock.lock();
      continue;
    }
    if (poll == Poll::kStreamed) backoff.streamed();
    const Backoff::Step step = backoff.next();
    if (step == Backoff::Step::kYield) sched_yield();
    lock.lock();
    if (step == Backoff::Step::kSleep) {
      wake_.wait_for(lock, backoff.pause(), [&] { return submitted_ != seen || drivers_ > 0; });
    }
  }
  lock.unlock();
  final_cpu_seconds_.store(seconds_of(CLOCK_THREAD_CPUTIME_ID));
  std::lock_guard token(token_);
  lanes_.clear();
  for (auto& group : groups_) MPI_Comm_free(&group->comm);
  groups_.clear();
}

}  // namespace gpt::comm::mpi
