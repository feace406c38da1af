// What the MPI test main hands to the test cases of a multi-rank doctest binary: the session and the world
// communicator (doctest test cases take no arguments, so the main publishes them here; tests only).
// Every rank runs every test case in the same order; a test case must issue the same collectives on every
// rank and use CHECK, not REQUIRE (a rank that leaves a test case early would leave its peers waiting).
#pragma once

#include "comm/communicator.h"
#include "comm/mpi_communicator.h"

namespace gpt::comm::testing {

MpiSession& session();
Communicator& world();
const MpiOptions& options();  // as parsed from --ranks-per-node K and --max-message-bytes B

}  // namespace gpt::comm::testing
