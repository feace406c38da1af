// Internal to the MPI backend: one collective operation in flight on the communication thread, written as a
// C++20 coroutine. An algorithm reads like its textbook form (post a receive, send, `co_await op.until(msg)`)
// while the communication thread interleaves many of them: every `co_await` on an incomplete message
// suspends the algorithm, and the progress loop resumes it once MPI_Test says the message is complete.
// Every payload byte goes through Op::isend, the single place where the traffic meter records sends.
#pragma once

#include <mpi.h>

#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"

namespace gpt::comm::mpi {

// Staging memory kept from one operation to the next. A fresh allocation of many megabytes is a fresh mmap
// whose every page faults on first touch, which is costly where page faults are (bench/comm, 4 ranks on
// this 2-core VM: a 32 MiB reduce-scatter took 398 ms with staging allocated per operation, 15 ms with
// glibc's mmap turned off).
class Scratch {
 public:
  // At least `bytes` bytes, uninitialized; valid until the next call.
  char* get(size_t bytes) {
    if (bytes > capacity_) {
      memory_.reset(new char[bytes]);
      capacity_ = bytes;
    }
    return memory_.get();
  }

 private:
  std::unique_ptr<char[]> memory_;
  size_t capacity_ = 0;
};

// A communicator as the communication thread sees it. Owned by the Engine; fields are fixed once built, but
// for the scratch of the operation that runs on it (only a group's front operation runs, so one at a time).
struct Group {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0;
  int size = 1;
  std::vector<int> world_ranks;  // by group rank
  std::vector<Link> link_to;     // by group rank: how a message to that rank travels under the topology
  mutable Scratch scratch;
};

// A coroutine that runs part or all of one operation. Lazily started; awaiting a Task from another Task runs
// it to completion as a sub-step (symmetric transfer, so nesting costs no stack). Exceptions propagate to the
// awaiting Task; the engine treats one escaping the top-level Task as fatal.
class Task {
 public:
  struct promise_type {
    std::coroutine_handle<> continuation = std::noop_coroutine();
    std::exception_ptr error;

    Task get_return_object() { return Task(std::coroutine_handle<promise_type>::from_promise(*this)); }
    std::suspend_always initial_suspend() noexcept { return {}; }
    struct FinalAwaiter {
      bool await_ready() noexcept { return false; }
      std::coroutine_handle<> await_suspend(std::coroutine_handle<promise_type> self) noexcept {
        return self.promise().continuation;
      }
      void await_resume() noexcept {}
    };
    FinalAwaiter final_suspend() noexcept { return {}; }
    void return_void() {}
    void unhandled_exception() { error = std::current_exception(); }
  };
  using Handle = std::coroutine_handle<promise_type>;

  Task() = default;
  explicit Task(Handle handle) : handle_(handle) {}
  Task(Task&& other) noexcept : handle_(std::exchange(other.handle_, {})) {}
  Task& operator=(Task&& other) noexcept {
    if (this != &other) {
      if (handle_) handle_.destroy();
      handle_ = std::exchange(other.handle_, {});
    }
    return *this;
  }
  ~Task() {
    if (handle_) handle_.destroy();
  }

  Handle handle() const { return handle_; }

  // co_await task: start it; resume the awaiting coroutine when it finishes.
  bool await_ready() const noexcept { return false; }
  std::coroutine_handle<> await_suspend(std::coroutine_handle<> awaiting) noexcept {
    handle_.promise().continuation = awaiting;
    return handle_;
  }
  void await_resume() const {
    if (handle_.promise().error) std::rethrow_exception(handle_.promise().error);
  }

 private:
  Handle handle_;
};

// A message handed to MPI, possibly as several segments: a range of the operation's requests.
struct Msg {
  uint32_t first = 0;
  uint32_t count = 0;
};

class Op {
 public:
  // name: the collective (a literal); label: what it serves (OperationLabel), for the watchdog's message.
  Op(const Group& group, Phase phase, TrafficMeter& meter, size_t max_message_bytes, const char* name,
     std::string label);

  // Set once, before the engine admits the operation.
  void set_body(Task body) { body_ = std::move(body); }
  // Set once, before the engine admits the operation: the completion of its Request, which block_arrived()
  // reports to (the engine keeps it alive until the operation is complete).
  void set_completion(Request::State* completion) { completion_ = completion; }
  // Set by the engine when it admits the operation: the sequence number among this group's operations.
  void set_sequence(uint32_t sequence) { tag_ = static_cast<int>(sequence & 0x7fff); }  // MPI_TAG_UB >= 32767

  // Communication thread: starts the body, or resumes it if the message it waits for is complete. Returns
  // true if the body ran (something completed), false if it is still waiting.
  bool advance();
  bool finished() const { return body_.handle().done(); }
  // The watchdog's description of a stalled operation: "reduce_scatter (grad_reduce, bucket 2) over 4 ranks:
  // waiting to receive from rank 3" (world ranks).
  std::string describe_wait() const;
  std::exception_ptr error() const { return body_.handle().promise().error; }

  // For algorithm bodies. Peers are group ranks other than rank(). A zero-byte isend/irecv posts nothing
  // and is complete at once (both sides know the sizes, so they skip it alike).
  // The group's staging memory, at least `bytes` long and uninitialized, for the rest of this operation.
  char* scratch(size_t bytes) { return group_.scratch.get(bytes); }
  int rank() const { return group_.rank; }
  int size() const { return group_.size; }
  Msg isend(int peer, const void* data, size_t bytes);
  Msg irecv(int peer, void* data, size_t bytes);
  // Zero-byte messages that are really posted, for synchronization (the barrier).
  Msg isend_token(int peer);
  Msg irecv_token(int peer);

  struct Until {
    Op& op;
    Msg msg;
    bool await_ready() { return op.test(msg); }
    void await_suspend(std::coroutine_handle<> waiting) {
      op.waiting_ = waiting;
      op.awaited_ = msg;
    }
    void await_resume() const noexcept {}
  };
  Until until(Msg msg) { return Until{*this, msg}; }
  Until until_all() { return Until{*this, Msg{0, static_cast<uint32_t>(requests_.size())}}; }
  // For an all-gather's body: rank `block`'s bytes are final in the output (Request::wait_block).
  void block_arrived(int block);

 private:
  bool test(Msg msg);
  Msg post(bool send, int peer, void* data, size_t bytes);

  const Group& group_;
  const Phase phase_;
  const char* name_;
  std::string label_;
  TrafficMeter& meter_;
  const size_t max_message_bytes_;
  int tag_ = 0;
  Task body_;
  Request::State* completion_ = nullptr;
  bool started_ = false;
  std::coroutine_handle<> waiting_;  // the innermost suspended coroutine of the body
  Msg awaited_;
  std::vector<MPI_Request> requests_;
  struct Peer {
    int rank;  // group rank
    bool send;
  };
  std::vector<Peer> peers_;  // by request
};

}  // namespace gpt::comm::mpi
