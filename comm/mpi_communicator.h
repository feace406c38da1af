// The MPI backend of Communicator (MPICH): our own collectives on MPI point-to-point messages.
//
// Design (details and reasons in mpi_engine.h, algorithms in mpi_collectives.h):
// - One communication thread per process makes the MPI calls after start-up while the callers compute. A
//   call on a Communicator only checks its arguments and queues the operation; the thread runs it and
//   completes its Request. So a gather or a reduce-scatter progresses while the caller computes, and compute
//   code never calls MPI. A caller that blocks in Request::wait makes the progress itself meanwhile (one
//   thread at a time holds the progress token), which saves the hand-over's context switches.
// - Operations on one communicator run in issue order, one at a time (every member issues them in the same
//   order); operations on different communicators (subgroups, or a second communicator over the same ranks)
//   run concurrently, so there is no hidden order between groups to deadlock on.
// - Each collective is a C++20 coroutine over its own MPI_Isend/MPI_Irecv requests (mpi_op.h); the thread
//   resumes whichever has a completed message. Op::isend is the one place that meters a send.
// - While messages are in flight the thread (or a waiting caller) polls with MPI_Test, then yields, then
//   sleeps with a capped exponential backoff; with nothing in flight, or while a caller drives, the thread
//   sleeps until it has work. Ranks share two cores
//   with the compute threads, so a spinning progress thread would cost the training step its compute.
//
//   int main(int argc, char** argv) {
//     gpt::comm::MpiSession session(argc, argv);          // MPI_Init_thread ... MPI_Finalize
//     std::unique_ptr<gpt::comm::Communicator> world;
//     try {
//       world = session.world({.ranks_per_node = flags.ranks_per_node});
//     } catch (const gpt::comm::TopologyError& e) {         // the same one line on every rank
//       std::fprintf(stderr, "error: %s\n", e.what());
//       return 2;                                           // the session still finalizes MPI cleanly
//     }
//     auto node = world->subgroup(...);                     // setup: node, cross-node, hpZ groups
//     ...
//   }
//
// The process's MPI state is global by nature; MpiSession is its one owner, so nothing else here is global.
#pragma once

#include <cstddef>
#include <memory>

#include "comm/communicator.h"

namespace gpt::comm {

namespace mpi {
class Engine;
}

struct MpiOptions {
  // Simulated nodes of K consecutive ranks (--ranks-per-node K); 0 detects the real nodes with
  // MPI_COMM_TYPE_SHARED, which must then be equal blocks of consecutive ranks.
  int ranks_per_node = 0;
  // A payload larger than this goes as several messages (MPI counts are int). Tests lower it to exercise
  // the segmentation; the meter and the byte counts do not change.
  size_t max_message_bytes = size_t(1) << 30;
  // Pipeline unit of the chained broadcast.
  size_t broadcast_segment_bytes = size_t(1) << 20;
  // The backoff of the thread that polls while messages are in flight (the communication thread, or a caller
  // waiting in Request::wait): polls before yielding, yields before sleeping, and the cap of the
  // exponentially growing sleep.
  // A 1 ms cap keeps a rank that waits for a late peer at about 3-5% of a core (bench/comm, 4 ranks on 2
  // cores) and adds at most about 1 ms to an operation that was already stalled for 2 ms or more; while data
  // flows, every completed message resets the backoff, so transfers are not slowed.
  // 256 yields: with more ranks than cores, a yielding thread hands its core to a rank with work and is back
  // as soon as it is free, where a sleeping one answers late. 8 ranks on 2 cores ran the ZeRO++ and engine
  // test programs 15-20% faster than with 64 (1024: 30%, but twice the CPU of a rank waiting for a late
  // peer, 9% against 5%); 0 took twice as long.
  int spin_polls = 64;
  int yield_polls = 256;
  int max_sleep_us = 1000;
  // The watchdog (gpt_train's --comm-timeout): when an operation in flight has made no progress for this many
  // seconds, the rank prints one line (the collective, its phase and label, the peer it waits for) and aborts
  // the job with MPI_Abort. 0 turns it off.
  double comm_timeout_s = 0;
};

// Owns MPI for the process: MPI_Init_thread in the constructor (asks for MPI_THREAD_MULTIPLE, requires at
// least MPI_THREAD_SERIALIZED, because the communication thread is not the main thread), and in the
// destructor: finish the queued operations, stop the communication thread, MPI_Finalize. Construct it first
// in main() (on the main thread) and destroy it last; communicators used after it throw std::logic_error.
class MpiSession {
 public:
  MpiSession(int& argc, char**& argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }

  // The communicator over all ranks, once per session; it starts the communication thread. Collective: every
  // rank calls it with the same options. Throws TopologyError (one line, the same on every rank, before the
  // thread starts) if options.ranks_per_node does not divide the world size or the ranks the launcher put on
  // one node, or (without it) the real nodes are not equal blocks of consecutive ranks. Topology detection
  // uses MPI_Comm_split_type and one small MPI_Allreduce on the main thread: setup, before any metered
  // operation.
  std::unique_ptr<Communicator> world(const MpiOptions& options = {});

  // CPU time consumed so far by the communication thread (0 before world()); a caller's own time spent
  // driving progress in Request::wait is not in it.
  double comm_thread_cpu_seconds() const;
  // The code main() will return; written into the finished-work marker (GPT_FINALIZE_MARKER_DIR) so that a
  // launcher that has to end a job stuck in MPI_Finalize still reports how it ended.
  void set_exit_code(int code) { exit_code_ = code; }

 private:
  int world_rank_ = 0;
  int world_size_ = 1;
  int exit_code_ = 0;
  std::shared_ptr<mpi::Engine> engine_;
};

// Ends the whole job from this rank with MPI_Abort(code), once what the rank wrote to stderr has had time to
// reach the launcher: MPICH's launcher kills every process at the first abort and drops the output its
// proxies have not forwarded yet (without this pause the watchdog's line was lost in 1 run of 12 on 4 ranks).
[[noreturn]] void abort_job(int code);

}  // namespace gpt::comm
