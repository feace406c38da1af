// A minimal MPI program that builds the world communicator from --ranks-per-node K the way gpt_train does:
// on a TopologyError every rank prints the one-line message and exits with code 2 (MPI still finalized), else
// rank 0 prints the topology and all exit 0. Driven by topology_error_test.sh.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "comm/mpi_communicator.h"

int main(int argc, char** argv) {
  gpt::comm::MpiSession session(argc, argv);
  gpt::comm::MpiOptions options;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--ranks-per-node") == 0) options.ranks_per_node = std::atoi(argv[i + 1]);
  }
  std::unique_ptr<gpt::comm::Communicator> world;
  try {
    world = session.world(options);
  } catch (const gpt::comm::TopologyError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  if (world->rank() == 0) std::printf("topology: %s\n", world->topology().describe().c_str());
  world->barrier().wait();
  return 0;
}
