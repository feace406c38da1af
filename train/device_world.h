// The communicator a run trains over, given its backend: on GPUs with one GPU per rank, NCCL (comm/
// nccl_communicator.h) over the MPI world; otherwise the MPI world itself (the CPU backend, or several ranks
// sharing a GPU, which NCCL refuses: their wire memory is pinned host memory, which MPI moves directly).
#pragma once

#include <memory>
#include <string>

#include "comm/communicator.h"
#include "kernels/ops.h"

namespace gpt {

struct DeviceWorld {
  std::unique_ptr<comm::Communicator> nccl;  // null when the run stays on MPI
  std::string description;                   // for the banner: "NCCL" or "MPI (...why...)"
};

// Collective over mpi_world (every rank calls it with its own backend, null for the CPU). mpi_world must
// outlive the result. Under NCCL the CUDA backend's wire memory becomes device memory (NCCL moves it on the
// GPU), unless host_uses_wire: the run's host code reads and writes wire buffers (ZeRO-Infinity's swap
// buffers, filled and drained by the disk), which then stay pinned host memory. Call before the backend's
// wire memory is first used (before the engine is built).
DeviceWorld make_device_world(comm::Communicator& mpi_world, Ops* backend, double comm_timeout_s,
                              bool host_uses_wire);

}  // namespace gpt
