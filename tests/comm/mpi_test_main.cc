// main() of the multi-rank doctest binaries: starts the MPI session, builds the world communicator from
// --ranks-per-node K (0 or absent: detect) and --max-message-bytes B, runs the test cases on every rank
// (rank 0 prints the full report, the others only their failures), and exits non-zero on any failing rank.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "tests/comm/mpi_test_env.h"

namespace gpt::comm::testing {
namespace {

MpiSession* the_session = nullptr;
Communicator* the_world = nullptr;
MpiOptions the_options;

}  // namespace

MpiSession& session() {
  return *the_session;
}
Communicator& world() {
  return *the_world;
}
const MpiOptions& options() {
  return the_options;
}

}  // namespace gpt::comm::testing

int main(int argc, char** argv) {
  using namespace gpt::comm;
  MpiSession session(argc, argv);
  MpiOptions& options = testing::the_options;
  // A hang names its collective and the peer it waits for (then aborts) before mpi_run.sh kills the job at
  // 100 s without a word.
  options.comm_timeout_s = 60;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--ranks-per-node") == 0) options.ranks_per_node = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--max-message-bytes") == 0) options.max_message_bytes = std::atoll(argv[i + 1]);
  }
  std::unique_ptr<Communicator> world;
  try {
    world = session.world(options);
  } catch (const TopologyError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  testing::the_session = &session;
  testing::the_world = world.get();
  if (session.world_rank() == 0) {
    std::printf("%d ranks, %s, max message %zu bytes\n", session.world_size(),
                world->topology().describe().c_str(), options.max_message_bytes);
  }

  doctest::Context context;
  context.applyCommandLine(argc, argv);
  if (session.world_rank() != 0) context.setOption("minimal", true);
  const int failed = context.run();
  if (failed) std::fprintf(stderr, "rank %d: test failures\n", session.world_rank());
  world->barrier().wait();  // no rank finalizes while another still has messages for it
  return failed ? 1 : 0;
}
