// The MPI backend of Communicator (MPICH): our own collectives on MPI point-to-point messages, progressed by
// one communication thread per process (design and reasons: mpi_engine.h; algorithms: mpi_collectives.h).
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
  // The communication thread's backoff while messages are in flight: polls before yielding, yields before
  // sleeping, and the cap of the exponentially growing sleep.
  int spin_polls = 64;
  int yield_polls = 64;
  int max_sleep_us = 100;
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
  // thread starts) if options.ranks_per_node does not divide the world size or the real nodes are not equal
  // blocks of consecutive ranks. Topology detection uses MPI_Comm_split_type and one small MPI_Allreduce on
  // the main thread: setup, before any metered operation.
  std::unique_ptr<Communicator> world(const MpiOptions& options = {});

  // CPU time consumed so far by the communication thread (0 before world()).
  double comm_thread_cpu_seconds() const;

 private:
  int world_rank_ = 0;
  int world_size_ = 1;
  std::shared_ptr<mpi::Engine> engine_;
};

}  // namespace gpt::comm
