// Communicator over NCCL: argument checks on the caller's thread, NCCL calls on the communicator's stream,
// Requests completed by a thread that polls CUDA events (the design is in nccl_communicator.h).
#include "comm/nccl_communicator.h"

#include <nccl.h>

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "comm/argument_checks.h"
#include "comm/mpi_communicator.h"
#include "comm/nccl_groups.h"
#include "comm/nccl_kernels.h"
#include "comm/nccl_traffic.h"
#include "comm/request.h"
#include "comm/wire_reduce.h"

namespace gpt::comm {
namespace {

static_assert(sizeof(ncclUniqueId) == kGroupIdBytes, "GroupId must hold an ncclUniqueId");

using Clock = std::chrono::steady_clock;

std::string cuda_problem(cudaError_t status) {
  return std::string(cudaGetErrorName(status)) + ": " + cudaGetErrorString(status);
}

void check_cuda(cudaError_t status, const char* call, const char* file, int line) {
  if (status == cudaSuccess) return;
  cudaGetLastError();  // clear a non-sticky error so that later calls are not blamed for it
  throw std::runtime_error(std::string("comm: ") + call + " failed at " + file + ":" + std::to_string(line) +
                           ": " + cuda_problem(status));
}

std::string nccl_problem(ncclResult_t status, ncclComm_t comm) {
  std::string text = ncclGetErrorString(status);
  const char* detail = ncclGetLastError(comm);
  if (detail && *detail) text += std::string(" (") + detail + ")";
  return text;
}

void check_nccl(ncclResult_t status, const char* call, const char* file, int line) {
  if (status == ncclSuccess) return;
  throw std::runtime_error(std::string("comm: ") + call + " failed at " + file + ":" + std::to_string(line) +
                           ": " + nccl_problem(status, nullptr));
}

#define COMM_CUDA(call) check_cuda((call), #call, __FILE__, __LINE__)
#define COMM_NCCL(call) check_nccl((call), #call, __FILE__, __LINE__)

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::kF16:
      return ncclFloat16;
    case DType::kBF16:
      return ncclBfloat16;
    case DType::kF64:
      return ncclFloat64;
    default:
      return ncclFloat32;
  }
}

nccl_kernels::Wire wire_of(DType dtype) {
  switch (dtype) {
    case DType::kF16:
      return nccl_kernels::Wire::kF16;
    case DType::kBF16:
      return nccl_kernels::Wire::kBF16;
    case DType::kF64:
      return nccl_kernels::Wire::kF64;
    default:
      return nccl_kernels::Wire::kF32;
  }
}

GroupId make_unique_id() {
  ncclUniqueId unique;
  COMM_NCCL(ncclGetUniqueId(&unique));
  GroupId id;
  std::memcpy(id.data(), &unique, sizeof unique);
  return id;
}

// The device address of p, or nullptr when the device cannot address it (pageable host memory). Device and
// managed memory are used as they are; pinned host memory through its device mapping.
void* device_address(const void* p) {
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, p) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  switch (attributes.type) {
    case cudaMemoryTypeDevice:
    case cudaMemoryTypeManaged:
      return const_cast<void*>(p);
    case cudaMemoryTypeHost:
      return attributes.devicePointer;
    default:
      return nullptr;
  }
}

// The buffers of one operation as NCCL sees them: the caller's own where the device can address them, device
// scratch (from the communicator's stream-ordered pool) for pageable host memory, filled before the operation
// and copied back after it. Scratch is freed in stream order, after the work that uses it.
class Staging {
 public:
  Staging(cudaStream_t stream, cudaMemPool_t pool) : stream_(stream), pool_(pool) {}
  ~Staging() { release(); }
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;

  void* reach(const void* data, size_t bytes, bool copy_in, bool copy_out) {
    if (bytes == 0) return const_cast<void*>(data);
    if (void* direct = device_address(data)) return direct;
    void* staged = scratch(bytes);
    if (copy_in) COMM_CUDA(cudaMemcpyAsync(staged, data, bytes, cudaMemcpyHostToDevice, stream_));
    if (copy_out) copy_back_.push_back({const_cast<void*>(data), staged, bytes});
    return staged;
  }

  void* scratch(size_t bytes) {
    void* block = nullptr;
    COMM_CUDA(cudaMallocFromPoolAsync(&block, bytes, pool_, stream_));
    scratch_.push_back(block);
    return block;
  }

  // Enqueues the copies back to pageable memory (cudaMemcpyAsync into pageable memory returns only when the
  // copy, and so the operation before it, is complete) and releases the scratch.
  void finish() {
    for (const CopyBack& copy : copy_back_) {
      COMM_CUDA(cudaMemcpyAsync(copy.host, copy.device, copy.bytes, cudaMemcpyDeviceToHost, stream_));
    }
    copy_back_.clear();
    release();
  }

 private:
  struct CopyBack {
    void* host;
    const void* device;
    size_t bytes;
  };
  void release() {
    for (void* block : scratch_) cudaFreeAsync(block, stream_);
    scratch_.clear();
  }

  cudaStream_t stream_;
  cudaMemPool_t pool_;
  std::vector<void*> scratch_;
  std::vector<CopyBack> copy_back_;
};

// The operations of one communicator in flight, and the thread that completes their Requests when the CUDA
// event recorded after each one fires. Events of one stream fire in order, so only the oldest is polled.
class Completions {
 public:
  Completions(int device, ncclComm_t comm, const NcclOptions& options, int world_rank)
      : device_(device), comm_(comm), options_(options), world_rank_(world_rank) {
    thread_ = std::thread([this] { loop(); });
  }
  ~Completions();  // completes what was issued, then stops the thread
  Completions(const Completions&) = delete;
  Completions& operator=(const Completions&) = delete;

  // Records an event on stream after the operation just enqueued and returns its Request.
  Request track(cudaStream_t stream, Phase phase, TrafficMeter& meter, const char* name);
  void drain();                  // blocks until every tracked operation completed; throws after a failure
  void throw_if_failed() const;  // for a new operation
  bool failed() const;

 private:
  struct Pending {
    cudaEvent_t done;
    std::shared_ptr<Request::State> state;
    const char* name;
    std::string label;
    Clock::time_point issued;
  };

  void loop();
  void complete_front();                     // mutex_ held
  void fail_all(const std::string& reason);  // mutex_ held
  // Between polls of an operation that is not done: asynchronous NCCL errors, the watchdog, the backoff.
  void wait_between_polls(std::unique_lock<std::mutex>& lock, int& polls);
  void check_watchdog(const Pending& front);

  const int device_;
  const ncclComm_t comm_;
  const NcclOptions options_;
  const int world_rank_;

  mutable std::mutex mutex_;
  std::condition_variable wake_;     // new work or stop
  std::condition_variable drained_;  // nothing pending
  std::deque<Pending> pending_;
  std::vector<cudaEvent_t> spare_events_;
  Clock::time_point last_completion_ = Clock::now();
  std::string failure_;  // non-empty once an operation failed
  bool stopping_ = false;
  std::thread thread_;
};

Completions::~Completions() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
  for (cudaEvent_t event : spare_events_) cudaEventDestroy(event);
}

Request Completions::track(cudaStream_t stream, Phase phase, TrafficMeter& meter, const char* name) {
  cudaEvent_t event = nullptr;
  {
    std::lock_guard lock(mutex_);
    if (!spare_events_.empty()) {
      event = spare_events_.back();
      spare_events_.pop_back();
    }
  }
  if (!event) COMM_CUDA(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  COMM_CUDA(cudaEventRecord(event, stream));
  auto state = std::make_shared<Request::State>(&meter, phase);
  {
    std::lock_guard lock(mutex_);
    pending_.push_back(Pending{event, state, name, OperationLabel::current(), Clock::now()});
  }
  wake_.notify_all();
  return Request(state);
}

void Completions::drain() {
  std::unique_lock lock(mutex_);
  drained_.wait(lock, [&] { return pending_.empty(); });
  if (!failure_.empty()) throw std::runtime_error(failure_);
}

void Completions::throw_if_failed() const {
  std::lock_guard lock(mutex_);
  if (!failure_.empty()) throw std::runtime_error(failure_);
}

bool Completions::failed() const {
  std::lock_guard lock(mutex_);
  return !failure_.empty();
}

void Completions::loop() {
  cudaSetDevice(device_);
  std::unique_lock lock(mutex_);
  int polls = 0;
  for (;;) {
    wake_.wait(lock, [&] { return stopping_ || !pending_.empty(); });
    if (pending_.empty()) return;  // stopping, and everything issued has completed
    cudaEvent_t event = pending_.front().done;
    lock.unlock();
    const cudaError_t status = cudaEventQuery(event);
    lock.lock();
    if (status == cudaSuccess) {
      complete_front();
      polls = 0;
    } else if (status != cudaErrorNotReady) {
      cudaGetLastError();
      fail_all("comm: NCCL " + std::string(pending_.front().name) +
               " failed on the GPU: " + cuda_problem(status));
    } else {
      wait_between_polls(lock, polls);
    }
  }
}

void Completions::complete_front() {
  Pending done = std::move(pending_.front());
  pending_.pop_front();
  spare_events_.push_back(done.done);
  last_completion_ = Clock::now();
  done.state->complete();
  if (pending_.empty()) drained_.notify_all();
}

void Completions::fail_all(const std::string& reason) {
  if (failure_.empty()) failure_ = reason;
  for (Pending& pending : pending_) {
    cudaEventDestroy(pending.done);  // released once it fires, if ever
    pending.state->complete(std::make_exception_ptr(std::runtime_error(reason)));
  }
  pending_.clear();
  drained_.notify_all();
}

void Completions::wait_between_polls(std::unique_lock<std::mutex>& lock, int& polls) {
  ++polls;
  if (polls % 64 == 0) {  // every few dozen polls: errors NCCL found asynchronously, and the watchdog
    ncclResult_t async = ncclSuccess;
    lock.unlock();
    const ncclResult_t queried = ncclCommGetAsyncError(comm_, &async);
    lock.lock();
    if (queried != ncclSuccess || (async != ncclSuccess && async != ncclInProgress)) {
      const ncclResult_t problem = queried != ncclSuccess ? queried : async;
      fail_all("comm: NCCL reported an error during " + std::string(pending_.front().name) + ": " +
               nccl_problem(problem, comm_));
      return;
    }
    check_watchdog(pending_.front());
  }
  if (polls <= options_.spin_polls) return;
  // Sleep on the condition variable (a stop request ends it early), growing to the cap.
  const int sleep_us = std::min(options_.max_poll_sleep_us, 1 << std::min(polls - options_.spin_polls, 16));
  wake_.wait_for(lock, std::chrono::microseconds(std::max(sleep_us, 1)));
}

void Completions::check_watchdog(const Pending& front) {
  const double timeout = options_.comm_timeout_s;
  const Clock::time_point since = std::max(front.issued, last_completion_);
  if (timeout <= 0 || Clock::now() - since < std::chrono::duration<double>(timeout)) return;
  std::fprintf(stderr,
               "comm: rank %d: NCCL %s%s%s not complete after %.0f s; aborting the job (--comm-timeout %.0f; "
               "raise it if a step can legitimately take longer)\n",
               world_rank_, front.name, front.label.empty() ? "" : " for ", front.label.c_str(), timeout,
               timeout);
  abort_job(3);
}

// The CUDA objects of one communicator: its stream, the event that orders it after the input stream, the
// scratch pool, and the word the barrier reduces.
struct StreamResources {
  explicit StreamResources(int device);
  ~StreamResources();
  StreamResources(const StreamResources&) = delete;
  StreamResources& operator=(const StreamResources&) = delete;

  cudaStream_t stream = nullptr;
  cudaEvent_t inputs_ready = nullptr;
  cudaMemPool_t pool = nullptr;
  int32_t* barrier_word = nullptr;
};

StreamResources::StreamResources(int device) {
  COMM_CUDA(cudaSetDevice(device));
  COMM_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  COMM_CUDA(cudaEventCreateWithFlags(&inputs_ready, cudaEventDisableTiming));
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  COMM_CUDA(cudaMemPoolCreate(&pool, &props));
  uint64_t keep_all = UINT64_MAX;  // keep freed scratch for the next operation instead of returning it
  COMM_CUDA(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_all));
  COMM_CUDA(cudaMalloc(&barrier_word, sizeof(int32_t)));
  COMM_CUDA(cudaMemsetAsync(barrier_word, 0, sizeof(int32_t), stream));
  COMM_CUDA(cudaStreamSynchronize(stream));
}

StreamResources::~StreamResources() {
  // Destructors must not throw; whatever fails here has already failed an operation.
  if (stream) cudaStreamSynchronize(stream);
  if (barrier_word) cudaFree(barrier_word);
  if (pool) cudaMemPoolDestroy(pool);
  if (inputs_ready) cudaEventDestroy(inputs_ready);
  if (stream) cudaStreamDestroy(stream);
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(std::unique_ptr<GroupTransport> transport, std::vector<int> world_ranks, int rank,
                   const GroupId& id, const Topology& topology, TrafficMeter& meter,
                   const NcclOptions& options)
      : transport_(std::move(transport)),
        world_ranks_(std::move(world_ranks)),
        rank_(rank),
        topology_(topology),
        meter_(meter),
        options_(options),
        traffic_(topology, world_ranks_),
        resources_(options.device) {
    ncclUniqueId unique;
    std::memcpy(&unique, id.data(), sizeof unique);
    COMM_NCCL(ncclCommInitRank(&nccl_, size(), unique, rank_));
    completions_ = std::make_unique<Completions>(options.device, nccl_, options, topology.world_rank);
  }

  ~NcclCommunicator() override {
    cudaSetDevice(options_.device);
    const bool failed = completions_->failed();
    completions_.reset();  // waits for what was issued
    if (failed) {
      ncclCommAbort(nccl_);
    } else {
      ncclCommDestroy(nccl_);
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(world_ranks_.size()); }
  int world_rank_of(int group_rank) const override {
    if (group_rank < 0 || group_rank >= size()) {
      throw std::out_of_range("comm: group rank " + std::to_string(group_rank) + " outside a group of " +
                              std::to_string(size()));
    }
    return world_ranks_[group_rank];
  }
  const Topology& topology() const override { return topology_; }
  TrafficMeter& meter() const override { return meter_; }
  // issue() makes the stream wait for an event recorded on the input stream (the compute stream) at the call.
  bool orders_after_device_work() const override { return options_.input_stream != nullptr; }

  std::unique_ptr<Communicator> subgroup(const std::vector<int>& world_ranks) override;
  Request all_gather(const void* send, void* recv, size_t bytes_per_rank, Phase phase) override;
  Request reduce_scatter(const void* send, DType dtype, void* recv, size_t count, float scale,
                         Phase phase) override;
  Request all_reduce(void* data, DType dtype, size_t count, float scale, Phase phase) override;
  Request all_to_all_v(const void* send, const std::vector<size_t>& send_bytes, void* recv,
                       const std::vector<size_t>& recv_bytes, Phase phase) override;
  Request broadcast(void* data, size_t bytes, int root, Phase phase) override;
  Request barrier() override;

 private:
  // Enqueues one operation: after the input stream's work, enqueue(staging) makes the NCCL calls, the copies
  // back follow, the model's bytes go to the meter, and an event after it all completes the Request.
  template <typename Enqueue>
  Request issue(const char* name, Phase phase, const LinkBytes& traffic, Enqueue&& enqueue) {
    std::lock_guard lock(issue_mutex_);
    completions_->throw_if_failed();
    COMM_CUDA(cudaSetDevice(options_.device));
    if (options_.input_stream) {
      COMM_CUDA(cudaEventRecord(resources_.inputs_ready, options_.input_stream));
      COMM_CUDA(cudaStreamWaitEvent(resources_.stream, resources_.inputs_ready, 0));
    }
    Staging staging(resources_.stream, resources_.pool);
    enqueue(staging);
    staging.finish();
    record(meter_, phase, traffic);
    return completions_->track(resources_.stream, phase, meter_, name);
  }

  void nccl_check(ncclResult_t status, const char* call) const {
    if (status != ncclSuccess) {
      throw std::runtime_error(std::string("comm: ") + call + " failed: " + nccl_problem(status, nccl_));
    }
  }
  void enqueue_all_to_all(char* in, const std::vector<size_t>& send_bytes, char* out,
                          const std::vector<size_t>& recv_bytes);

  std::unique_ptr<GroupTransport> transport_;  // the members' MPI group, for the id broadcast of subgroups
  const std::vector<int> world_ranks_;
  const int rank_;
  const Topology topology_;
  TrafficMeter& meter_;
  const NcclOptions options_;
  const RingTraffic traffic_;
  StreamResources resources_;
  ncclComm_t nccl_ = nullptr;
  std::mutex issue_mutex_;
  std::unique_ptr<Completions> completions_;  // last: stopped first
};

std::unique_ptr<Communicator> NcclCommunicator::subgroup(const std::vector<int>& world_ranks) {
  if (!plan_group(world_ranks_, topology_.world_rank, world_ranks)) return nullptr;
  completions_->drain();
  std::optional<JoinedGroup> joined =
      join_group(*transport_, world_ranks_, topology_.world_rank, world_ranks, make_unique_id);
  return std::make_unique<NcclCommunicator>(std::move(joined->transport), joined->world_ranks,
                                            joined->plan.rank, joined->id, topology_, meter_, options_);
}

Request NcclCommunicator::all_gather(const void* send, void* recv, size_t bytes_per_rank, Phase phase) {
  require_buffers(bytes_per_rank, {send, recv}, "all_gather");
  return issue("all_gather", phase, traffic_.all_gather(rank_, bytes_per_rank), [&](Staging& staging) {
    if (bytes_per_rank == 0) return;
    const size_t mine = rank_ * bytes_per_rank;
    const bool in_place = send == static_cast<const char*>(recv) + mine;
    char* out = static_cast<char*>(staging.reach(recv, size() * bytes_per_rank, in_place, true));
    const void* in = in_place ? out + mine : staging.reach(send, bytes_per_rank, true, false);
    nccl_check(ncclAllGather(in, out, bytes_per_rank, ncclUint8, nccl_, resources_.stream), "ncclAllGather");
  });
}

Request NcclCommunicator::reduce_scatter(const void* send, DType dtype, void* recv, size_t count, float scale,
                                         Phase phase) {
  require_reducible(dtype, "reduce_scatter");
  require_buffers(count, {send, recv}, "reduce_scatter");
  const size_t element = dtype_size(dtype);
  return issue(
      "reduce_scatter", phase, traffic_.reduce_scatter(rank_, count, element), [&](Staging& staging) {
        if (count == 0) return;
        const size_t all = size() * count * element, mine = rank_ * count * element;
        const bool sums_in_wire = accumulation_dtype(dtype) == dtype;  // f32 and f64
        const bool in_place = sums_in_wire && recv == static_cast<const char*>(send) + mine;
        char* in = static_cast<char*>(staging.reach(send, all, true, in_place));
        void* out = in_place
                        ? in + mine
                        : staging.reach(recv, count * dtype_size(accumulation_dtype(dtype)), false, true);
        const cudaStream_t stream = resources_.stream;
        if (sums_in_wire) {
          nccl_check(ncclReduceScatter(in, out, count, nccl_type(dtype), ncclSum, nccl_, stream),
                     "ncclReduceScatter");
          if (scale != 1.0f)
            COMM_CUDA(nccl_kernels::rescale_in_place(out, wire_of(dtype), scale, count, stream));
        } else {
          void* sum = staging.scratch(count * element);  // the wire-dtype sum, widened into recv below
          nccl_check(ncclReduceScatter(in, sum, count, nccl_type(dtype), ncclSum, nccl_, stream),
                     "ncclReduceScatter");
          COMM_CUDA(nccl_kernels::widen_scaled(sum, out, wire_of(dtype), scale, count, stream));
        }
      });
}

Request NcclCommunicator::all_reduce(void* data, DType dtype, size_t count, float scale, Phase phase) {
  require_reducible(dtype, "all_reduce");
  require_buffers(count, {data}, "all_reduce");
  const size_t element = dtype_size(dtype);
  return issue("all_reduce", phase, traffic_.all_reduce(rank_, count, element), [&](Staging& staging) {
    if (count == 0) return;
    void* buffer = staging.reach(data, count * element, true, true);
    const cudaStream_t stream = resources_.stream;
    nccl_check(ncclAllReduce(buffer, buffer, count, nccl_type(dtype), ncclSum, nccl_, stream),
               "ncclAllReduce");
    if (scale != 1.0f)
      COMM_CUDA(nccl_kernels::rescale_in_place(buffer, wire_of(dtype), scale, count, stream));
  });
}

Request NcclCommunicator::all_to_all_v(const void* send, const std::vector<size_t>& send_bytes, void* recv,
                                       const std::vector<size_t>& recv_bytes, Phase phase) {
  const AllToAllTotals totals = check_all_to_all_v(rank_, size(), send_bytes, recv_bytes);
  const size_t sent = totals.sent, received = totals.received;
  require_buffers(sent, {send}, "all_to_all_v");
  require_buffers(received, {recv}, "all_to_all_v");
  return issue("all_to_all_v", phase, traffic_.all_to_all_v(rank_, send_bytes), [&](Staging& staging) {
    char* in = static_cast<char*>(staging.reach(send, sent, true, false));
    char* out = static_cast<char*>(staging.reach(recv, received, false, true));
    enqueue_all_to_all(in, send_bytes, out, recv_bytes);
  });
}

// The own block as a copy on the stream, every other block as one ncclSend/ncclRecv pair in a single group
// (so all of them progress together); empty blocks are skipped on both sides alike (the sizes must agree).
void NcclCommunicator::enqueue_all_to_all(char* in, const std::vector<size_t>& send_bytes, char* out,
                                          const std::vector<size_t>& recv_bytes) {
  const int n = size();
  std::vector<size_t> send_at(n + 1, 0), recv_at(n + 1, 0);
  for (int p = 0; p < n; ++p) {
    send_at[p + 1] = send_at[p] + send_bytes[p];
    recv_at[p + 1] = recv_at[p] + recv_bytes[p];
  }
  const cudaStream_t stream = resources_.stream;
  if (send_bytes[rank_] > 0) {
    COMM_CUDA(cudaMemcpyAsync(out + recv_at[rank_], in + send_at[rank_], send_bytes[rank_], cudaMemcpyDefault,
                              stream));
  }
  ncclResult_t first_error = ncclGroupStart();
  if (first_error != ncclSuccess) nccl_check(first_error, "ncclGroupStart");
  for (int p = 0; p < n && first_error == ncclSuccess; ++p) {
    if (p == rank_) continue;
    if (send_bytes[p] > 0)
      first_error = ncclSend(in + send_at[p], send_bytes[p], ncclUint8, p, nccl_, stream);
    if (recv_bytes[p] > 0 && first_error == ncclSuccess) {
      first_error = ncclRecv(out + recv_at[p], recv_bytes[p], ncclUint8, p, nccl_, stream);
    }
  }
  const ncclResult_t ended = ncclGroupEnd();  // always closes the group, even after an error
  nccl_check(first_error, "ncclSend/ncclRecv");
  nccl_check(ended, "ncclGroupEnd");
}

Request NcclCommunicator::broadcast(void* data, size_t bytes, int root, Phase phase) {
  if (root < 0 || root >= size()) {
    throw std::invalid_argument("comm: broadcast root " + std::to_string(root) + " outside a group of " +
                                std::to_string(size()));
  }
  require_buffers(bytes, {data}, "broadcast");
  return issue("broadcast", phase, traffic_.broadcast(rank_, bytes, root), [&](Staging& staging) {
    if (bytes == 0) return;
    void* buffer = staging.reach(data, bytes, rank_ == root, true);
    nccl_check(ncclBroadcast(buffer, buffer, bytes, ncclUint8, root, nccl_, resources_.stream),
               "ncclBroadcast");
  });
}

Request NcclCommunicator::barrier() {
  return issue("barrier", Phase::kOther, traffic_.all_reduce(rank_, 1, sizeof(int32_t)), [&](Staging&) {
    int32_t* word = resources_.barrier_word;
    nccl_check(ncclAllReduce(word, word, 1, ncclInt32, ncclSum, nccl_, resources_.stream), "ncclAllReduce");
  });
}

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(Communicator& host, const NcclOptions& options) {
  COMM_CUDA(cudaSetDevice(options.device));
  std::vector<int> members(host.size());
  for (int r = 0; r < host.size(); ++r) members[r] = host.world_rank_of(r);
  auto transport = std::make_unique<CommunicatorTransport>(host);
  const GroupId id = share_id(*transport, make_unique_id);
  return std::make_unique<NcclCommunicator>(std::move(transport), std::move(members), host.rank(), id,
                                            host.topology(), host.meter(), options);
}

int choose_nccl_device(Communicator& host) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) {
    cudaGetLastError();
    devices = 0;
  }
  const int device = devices > 0 ? device_of_rank(host.topology(), devices) : -1;
  // Byte 0: whether this rank has a device; bytes 1..16: its UUID.
  std::array<uint8_t, 1 + sizeof(DeviceUuid)> mine{};
  cudaDeviceProp props{};
  if (device >= 0 && cudaGetDeviceProperties(&props, device) == cudaSuccess) {
    static_assert(sizeof(props.uuid.bytes) == sizeof(DeviceUuid));
    mine[0] = 1;
    std::memcpy(mine.data() + 1, props.uuid.bytes, sizeof(DeviceUuid));
  }
  std::vector<uint8_t> all(host.size() * mine.size());
  host.all_gather(mine.data(), all.data(), mine.size(), Phase::kOther).wait();
  std::vector<std::optional<DeviceUuid>> device_of_each_rank(host.size());
  for (int r = 0; r < host.size(); ++r) {
    const uint8_t* entry = all.data() + r * mine.size();
    if (entry[0] == 0) continue;
    DeviceUuid uuid;
    std::memcpy(uuid.data(), entry + 1, uuid.size());
    device_of_each_rank[r] = uuid;
  }
  return every_rank_has_own_gpu(device_of_each_rank) ? device : -1;
}

}  // namespace gpt::comm
