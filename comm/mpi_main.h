// The body of an MPI program's main(): base/main.h's run_main with the MPI session around it. Every rank
// validates the same inputs, so a UsageError is thrown on every rank and each prints the same one line and
// exits with code 2, with MPI finalized cleanly. Any other exception on a world of several ranks is
// reported and ends the job with MPI_Abort (code 1): a rank failing alone could never meet the others in
// MPI_Finalize, so returning would hang the job.
//
//   int main(int argc, char** argv) {
//     return gpt::comm::run_mpi_main("gpt_train", argc, argv, [&](gpt::comm::MpiSession& session) {
//       ...
//       return 0;
//     });
//   }
#pragma once

#include <functional>

#include "comm/mpi_communicator.h"

namespace gpt::comm {

int run_mpi_main(const char* program, int& argc, char**& argv, const std::function<int(MpiSession&)>& body);

}  // namespace gpt::comm
