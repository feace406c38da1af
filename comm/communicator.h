// The communication room's interface: a group of ranks with our own collectives (rings and pairwise
// exchanges built on point-to-point messages, so the traffic meter sees every byte that really moves),
// blocking and asynchronous, tagged with the phase of the training step they serve. Backends: MPI
// (mpi_communicator.h), NCCL for one GPU per rank (nccl_communicator.h), and the dry run's world on paper
// (dry_communicator.h). Knows nothing about models or optimizers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/user_error.h"
#include "comm/traffic.h"
#include "tensor/tensor.h"

namespace gpt::comm {

// The dtype a reduction of wire dtype `wire` adds in, and its result's: kF64 for kF64 data (the
// double-precision gradient checks), kF32 for everything else.
inline DType accumulation_dtype(DType wire) {
  return wire == DType::kF64 ? DType::kF64 : DType::kF32;
}

// What the operations issued on this thread serve (for example "gather of h.3" or "bucket 2"), while the
// label lives: the communication watchdog names it when an operation stops making progress. Labels nest;
// the innermost applies.
class OperationLabel {
 public:
  explicit OperationLabel(std::string text);
  ~OperationLabel();
  OperationLabel(const OperationLabel&) = delete;
  OperationLabel& operator=(const OperationLabel&) = delete;
  // The innermost label of this thread, "" when none.
  static const std::string& current();

 private:
  std::string text_;
  const OperationLabel* outer_;
};

// A pending collective. wait() blocks until it is complete and adds the time spent blocked to the meter's
// comm_wait for the operation's phase; it rethrows (as std::runtime_error or the original exception) if the
// operation failed. Waiting again is allowed and returns at once. A default-constructed Request is already
// complete. The buffers of an operation belong to it until it is complete: do not read its output, write its
// input or free either before wait() returns (or done() is true).
// An all-gather's output arrives one rank's block at a time: wait_block(r) returns once block r (rank r's
// bytes) is final in recv, so a caller can work on it while later blocks are still on the way. A backend that
// reports no per-block arrival (NCCL) makes it the same as wait(); the MPI ring reports each block as it
// lands. Blocking time counts as in wait(), and a failed operation rethrows. Block r may be read then; the
// rest of the output and the input still belong to the operation until wait() returns.
class Request {
 public:
  struct State;  // comm/request.h: the completion object a backend signals
  Request() = default;
  explicit Request(std::shared_ptr<State> state) : state_(std::move(state)) {}
  void wait();
  void wait_block(int block);
  bool done() const;

 private:
  std::shared_ptr<State> state_;
};

// Which world ranks form nodes. Nodes are blocks of ranks_per_node consecutive world ranks (real nodes from
// MPI_COMM_TYPE_SHARED must be laid out that way; simulated ones are by definition).
struct Topology {
  int world_size = 1;
  int world_rank = 0;
  int ranks_per_node = 1;  // L
  bool simulated = false;  // from --ranks-per-node rather than from the machine

  int num_nodes() const { return world_size / ranks_per_node; }  // N
  int node_of(int rank) const { return rank / ranks_per_node; }
  int node() const { return node_of(world_rank); }
  int local_rank() const { return world_rank % ranks_per_node; }
  // This rank's index among the processes on its machine: the local rank on real nodes, the world rank when
  // the nodes are simulated (they all run on one machine). Picks the GPU a rank drives.
  int machine_rank() const { return simulated ? world_rank : local_rank(); }
  std::string describe() const;  // "2 nodes x 2 ranks per node (simulated)"
};

// A topology the user asked for that cannot be: the message is one line naming the setting, the values and
// the fix, identical on every rank, so that every rank prints it and exits with code 2 (a UsageError).
class TopologyError : public UsageError {
 public:
  using UsageError::UsageError;
};

// The topology with ranks_per_node consecutive ranks per node. Throws TopologyError when ranks_per_node is
// not positive or does not divide world_size; the message names `--ranks-per-node` when simulated.
Topology make_topology(int world_size, int world_rank, int ranks_per_node, bool simulated);

// Ordering and concurrency: operations on one communicator run one after another in the order this process
// issued them, and every member must issue them in the same order. Operations on different communicators
// (a subgroup, or a second communicator over the same ranks) run concurrently, so no order between
// communicators is required. Operations may be issued from any thread. Argument errors throw
// std::invalid_argument at the call, before anything is sent.
class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;  // within this group
  virtual int size() const = 0;
  virtual int world_rank_of(int group_rank) const = 0;
  virtual const Topology& topology() const = 0;
  virtual TrafficMeter& meter() const = 0;
  // Whether an operation issued here is ordered after the device work issued before the call, so that a
  // caller whose device backend still has work queued (a GPU stream writing a send buffer, or yet to read a
  // buffer the operation will overwrite) may issue it without waiting. false (MPI): the communicator reads
  // and writes the buffers on the host and sees no device work; the caller must finish that work first
  // (zero/context.h, EngineContext::before_communication). true (NCCL with an input stream): the operation
  // runs on the communicator's stream behind an event recorded on the compute stream at the call. Either way
  // the outputs are complete, for the host and every stream, once the Request's wait() returns.
  virtual bool orders_after_device_work() const = 0;

  // A communicator over a subset of this communicator's ranks, given as world ranks in group-rank order (for
  // example a node's ranks, or the ranks with the same local index on every node). Every world rank must call
  // this with its own group, in the same order of calls; ranks not listed receive nullptr at once. A member
  // blocks until all members have called it and until its own operations issued earlier have finished. It
  // shares this communicator's topology and meter. Meant for setup, not for the training loop.
  virtual std::unique_ptr<Communicator> subgroup(const std::vector<int>& world_ranks) = 0;

  // Ring all-gather in rank order: send holds bytes_per_rank bytes; recv (size() * bytes_per_rank) gets rank
  // r's bytes at offset r * bytes_per_rank. Dtype-agnostic (qwZ sends int8 blocks and their scales as bytes).
  // send may be recv + rank() * bytes_per_rank (in place); it must not overlap recv otherwise.
  virtual Request all_gather(const void* send, void* recv, size_t bytes_per_rank, Phase phase) = 0;

  // Ring reduce-scatter: send holds size() * count elements of dtype (the wire dtype: f32, f16 or bf16; f64
  // for the double-precision gradient checks). On completion recv holds chunk rank() (elements
  // [rank*count, (rank+1)*count)) summed over all ranks and multiplied by scale (1/size() for the mean), in
  // the accumulation dtype: fp32, or fp64 when dtype is f64 (comm/wire_reduce.h). Partial sums travel in
  // dtype; every addition is done in the accumulation dtype (a received partial is widened, added to the
  // local chunk, and rounded once to dtype before it is sent on). With dtype f32 or f64, recv may be
  // send + rank() * count (in place); otherwise the buffers must not overlap.
  virtual Request reduce_scatter(const void* send, DType dtype, void* recv, size_t count, float scale,
                                 Phase phase) = 0;

  // All-reduce in place as reduce-scatter then all-gather, both rings, data in dtype, sums in its
  // accumulation dtype, times scale. Any count: chunks are ceil(count/size()) elements, the last ones shorter
  // or empty.
  virtual Request all_reduce(void* data, DType dtype, size_t count, float scale, Phase phase) = 0;

  // Pairwise all-to-all of bytes: send_bytes[p] bytes (consecutive in send) go to rank p; recv_bytes[p] bytes
  // (consecutive in recv) come from rank p. Self-copies are local and not counted as traffic.
  virtual Request all_to_all_v(const void* send, const std::vector<size_t>& send_bytes, void* recv,
                               const std::vector<size_t>& recv_bytes, Phase phase) = 0;

  // root's bytes to every rank (the backend documents its algorithm; every byte it sends is metered).
  virtual Request broadcast(void* data, size_t bytes, int root, Phase phase) = 0;
  // Completes on a rank once every rank has started it. Moves no payload; any bytes it sends count in kOther.
  virtual Request barrier() = 0;
};

// Sums `local` (a snapshot of this rank's meter) over the ranks of comm, blocking: bytes exactly (64-bit
// integers), wait_ms as sums (divide by comm.size() for the mean). Every rank of comm must call it. Its own
// messages go through comm in phase kOther and the meter records them, but only after `local` was taken, so
// they are not in the result; take the snapshot first, then call this (the next snapshot will include them).
TrafficCounts sum_over_ranks(Communicator& comm, const TrafficCounts& local);

}  // namespace gpt::comm
