// A PMPI interposer for tests: linked into a binary (the //tests/comm:pmpi_counter target is alwayslink and
// must be linked statically, which cc_binary does by default), it defines MPI_Isend and the other
// point-to-point send calls, counts the bytes of every call by destination world rank, and forwards the call
// to PMPI_*. It also counts calls of MPI's own data collectives, which our backend must never make. This is
// an independent witness of what really reached MPI, to check the traffic meter against to the byte.
// MPI calls the interposer from wherever it is linked, so its counts are necessarily process-global.
#pragma once

#include <cstdint>
#include <vector>

namespace gpt::comm::pmpi {

struct Counts {
  std::vector<uint64_t> bytes_to;  // by destination rank in MPI_COMM_WORLD (size: the world size)
  uint64_t send_calls = 0;         // point-to-point send calls seen (any size, any variant)
  uint64_t collective_calls = 0;   // calls of MPI_Allreduce, MPI_Allgather, MPI_Bcast, ... (data collectives)
};

// The counts since the start or the last reset(). Thread-safe.
Counts counts();
void reset();

}  // namespace gpt::comm::pmpi
