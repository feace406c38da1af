// The MPI session, the topology of the launched job, and Communicator over the engine's groups: argument
// checks on the caller's thread, then one queued operation per call.
#include "comm/mpi_communicator.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>

#include "comm/argument_checks.h"
#include "comm/mpi_collectives.h"
#include "comm/mpi_engine.h"
#include "comm/wire_reduce.h"

namespace gpt::comm {
namespace {

using mpi::Engine;
using mpi::Group;
using mpi::Op;

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(std::shared_ptr<Engine> engine, Group* group) : engine_(std::move(engine)), group_(group) {}

  int rank() const override { return group_->rank; }
  int size() const override { return group_->size; }
  int world_rank_of(int group_rank) const override {
    if (group_rank < 0 || group_rank >= group_->size) {
      throw std::out_of_range("comm: group rank " + std::to_string(group_rank) + " outside a group of " +
                              std::to_string(group_->size));
    }
    return group_->world_ranks[group_rank];
  }
  const Topology& topology() const override { return engine_->topology(); }
  TrafficMeter& meter() const override { return engine_->meter(); }
  bool orders_after_device_work() const override { return false; }  // the host moves the bytes

  std::unique_ptr<Communicator> subgroup(const std::vector<int>& world_ranks) override {
    const int me = engine_->topology().world_rank;
    if (std::find(world_ranks.begin(), world_ranks.end(), me) == world_ranks.end()) return nullptr;
    std::vector<int> sorted = world_ranks;
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
      throw std::invalid_argument("comm: subgroup lists a rank twice");
    }
    for (int world_rank : world_ranks) {
      if (std::find(group_->world_ranks.begin(), group_->world_ranks.end(), world_rank) ==
          group_->world_ranks.end()) {
        throw std::invalid_argument("comm: subgroup member " + std::to_string(world_rank) +
                                    " is not in the parent communicator");
      }
    }
    return std::make_unique<MpiCommunicator>(engine_, engine_->create_group(*group_, world_ranks));
  }

  Request all_gather(const void* send, void* recv, size_t bytes_per_rank, Phase phase) override {
    require_buffers(bytes_per_rank, {send, recv}, "all_gather");
    return engine_->submit(*group_, phase, "all_gather",
                           [=](Op& op) { return mpi::all_gather_body(op, send, recv, bytes_per_rank); });
  }

  Request reduce_scatter(const void* send, DType dtype, void* recv, size_t count, float scale,
                         Phase phase) override {
    require_reducible(dtype, "reduce_scatter");
    require_buffers(count, {send, recv}, "reduce_scatter");
    return engine_->submit(*group_, phase, "reduce_scatter", [=](Op& op) {
      return mpi::reduce_scatter_body(op, send, dtype, recv, count, scale);
    });
  }

  Request all_reduce(void* data, DType dtype, size_t count, float scale, Phase phase) override {
    require_reducible(dtype, "all_reduce");
    require_buffers(count, {data}, "all_reduce");
    return engine_->submit(*group_, phase, "all_reduce",
                           [=](Op& op) { return mpi::all_reduce_body(op, data, dtype, count, scale); });
  }

  Request all_to_all_v(const void* send, const std::vector<size_t>& send_bytes, void* recv,
                       const std::vector<size_t>& recv_bytes, Phase phase) override {
    const AllToAllTotals totals = check_all_to_all_v(rank(), size(), send_bytes, recv_bytes);
    require_buffers(totals.sent, {send}, "all_to_all_v");
    require_buffers(totals.received, {recv}, "all_to_all_v");
    return engine_->submit(*group_, phase, "all_to_all_v", [=](Op& op) {
      return mpi::all_to_all_v_body(op, send, send_bytes, recv, recv_bytes);
    });
  }

  Request broadcast(void* data, size_t bytes, int root, Phase phase) override {
    if (root < 0 || root >= size()) {
      throw std::invalid_argument("comm: broadcast root " + std::to_string(root) + " outside a group of " +
                                  std::to_string(size()));
    }
    require_buffers(bytes, {data}, "broadcast");
    const size_t segment = engine_->options().broadcast_segment_bytes;
    return engine_->submit(*group_, phase, "broadcast",
                           [=](Op& op) { return mpi::broadcast_body(op, data, bytes, root, segment); });
  }

  Request barrier() override {
    return engine_->submit(*group_, Phase::kOther, "barrier", [](Op& op) { return mpi::barrier_body(op); });
  }

 private:
  std::shared_ptr<Engine> engine_;
  Group* group_;  // owned by the engine
};

// The launcher's nodes, as MPI_COMM_TYPE_SHARED groups the ranks (hydra from its host list, srun from Slurm's
// allocation). The same answer on every rank.
struct LauncherNodes {
  int fewest = 0, most = 0;  // ranks on the emptiest and the fullest node
  bool regular = false;      // equal blocks of consecutive ranks: node n holds ranks [n*L, (n+1)*L)
};

LauncherNodes find_launcher_nodes(int world_size, int world_rank) {
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank, MPI_INFO_NULL, &node);
  int local_rank = 0, local_size = 1;
  MPI_Comm_rank(node, &local_rank);
  MPI_Comm_size(node, &local_size);
  MPI_Group node_group, world_group;
  MPI_Comm_group(node, &node_group);
  MPI_Comm_group(MPI_COMM_WORLD, &world_group);
  int zero = 0, first = 0;
  MPI_Group_translate_ranks(node_group, 1, &zero, world_group, &first);
  MPI_Group_free(&node_group);
  MPI_Group_free(&world_group);
  MPI_Comm_free(&node);

  // One setup check with MPI's all-reduce: every rank must agree that the layout is regular.
  const int regular = (first == world_rank - local_rank && first % local_size == 0) ? 1 : 0;
  int mine[3] = {local_size, -local_size, regular}, least[3];
  MPI_Allreduce(mine, least, 3, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  LauncherNodes nodes;
  nodes.fewest = least[0];
  nodes.most = -least[1];
  nodes.regular = nodes.fewest == nodes.most && least[2] != 0 && world_size % nodes.fewest == 0;
  return nodes;
}

// Real nodes, unless --ranks-per-node K simulates smaller ones: the engine's groups (and the meter's closed
// forms) assume node n holds ranks [n*L, (n+1)*L), so simulated nodes must tile the real ones.
Topology choose_topology(int world_size, int world_rank, int ranks_per_node) {
  const LauncherNodes found = find_launcher_nodes(world_size, world_rank);
  if (ranks_per_node != 0) {
    Topology simulated = make_topology(world_size, world_rank, ranks_per_node, true);
    if (found.regular && found.most % ranks_per_node != 0) {
      throw TopologyError("--ranks-per-node " + std::to_string(ranks_per_node) + " does not divide the " +
                          std::to_string(found.most) +
                          " ranks per node the launcher placed (MPI's shared-memory split): simulated "
                          "nodes must tile the real ones; leave --ranks-per-node out to use the real "
                          "nodes, or pass a divisor of " +
                          std::to_string(found.most));
    }
    return simulated;
  }
  if (!found.regular) {
    throw TopologyError(
        "the nodes of this job are not equal blocks of consecutive ranks (between " +
        std::to_string(found.fewest) + " and " + std::to_string(found.most) +
        " ranks per node); launch the same number of ranks on every " +
        "node with consecutive ranks together (mpiexec -ppn), or pass --ranks-per-node K to simulate nodes");
  }
  return make_topology(world_size, world_rank, found.most, /*simulated=*/false);
}

}  // namespace

MpiSession::MpiSession(int& argc, char**& argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) throw std::logic_error("comm: MPI is already initialized (one MpiSession per process)");
  int provided = MPI_THREAD_SINGLE;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  if (provided < MPI_THREAD_SERIALIZED) {
    MPI_Finalize();
    throw std::runtime_error("comm: this MPI library gives thread level " + std::to_string(provided) +
                             "; the communication thread needs MPI_THREAD_SERIALIZED or better");
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
}

MpiSession::~MpiSession() {
  if (engine_) engine_->stop();
  // Every rank arrives here only after its last message completed; meeting before MPI_Finalize keeps one
  // node's ranks from tearing down their transport while another's still close theirs (seen with UCX over TCP
  // between network namespaces: a finalize that never returned).
  MPI_Barrier(MPI_COMM_WORLD);
  // UCX over TCP can still hang inside MPI_Finalize (openucx/ucx#8738: one side stops progressing before the
  // other has flushed its endpoint). With GPT_FINALIZE_MARKER_DIR set (scripts/cluster run and the batch
  // scripts of examples/slurm set it), each rank leaves a marker here once all work is done, so the launcher
  // can end a job stuck in that state. (A rank that left by itself instead, _exit after a timeout, breaks
  // hydra's PMI barrier of the others' MPI_Finalize and turns the job's exit code into a failure.)
  if (const char* dir = std::getenv("GPT_FINALIZE_MARKER_DIR")) {
    const std::string marker = std::string(dir) + "/rank" + std::to_string(world_rank_);
    if (std::FILE* f = std::fopen(marker.c_str(), "w")) {
      std::fprintf(f, "%d\n", exit_code_);
      std::fclose(f);
    }
  }
  std::fflush(stdout);
  std::fflush(stderr);
  MPI_Finalize();
}

std::unique_ptr<Communicator> MpiSession::world(const MpiOptions& options) {
  if (engine_) throw std::logic_error("comm: MpiSession::world() called twice");
  const Topology topology = choose_topology(world_size_, world_rank_, options.ranks_per_node);
  mpi::EngineOptions engine_options;
  engine_options.max_message_bytes = options.max_message_bytes;
  engine_options.broadcast_segment_bytes = options.broadcast_segment_bytes;
  engine_options.spin_polls = options.spin_polls;
  engine_options.yield_polls = options.yield_polls;
  engine_options.max_sleep_us = options.max_sleep_us;
  engine_options.progress_timeout_s = options.comm_timeout_s;
  engine_ = std::make_shared<Engine>(topology, engine_options);
  // Our own duplicate of MPI_COMM_WORLD, so that no message of ours can match anyone else's.
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  Group* group = engine_->add_world_group(comm);
  engine_->start();
  return std::make_unique<MpiCommunicator>(engine_, group);
}

double MpiSession::comm_thread_cpu_seconds() const {
  return engine_ ? engine_->thread_cpu_seconds() : 0.0;
}

void abort_job(int code) {
  std::fflush(stderr);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  MPI_Abort(MPI_COMM_WORLD, code);
  std::abort();  // MPI_Abort does not return
}

}  // namespace gpt::comm
