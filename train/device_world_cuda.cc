// make_device_world in a build with the CUDA backend: NCCL when every rank has a GPU of its own.
#include <stdexcept>
#include <string>

#include "comm/nccl_communicator.h"
#include "kernels/cuda/cuda_ops.h"
#include "train/device_world.h"

namespace gpt {

DeviceWorld make_device_world(comm::Communicator& mpi_world, Ops* backend, double comm_timeout_s) {
  const auto* gpu = dynamic_cast<const cuda::CudaOps*>(backend);
  if (!gpu) return {nullptr, "MPI"};
  // Collective, so every rank learns the same answer; -1 everywhere unless each rank has its own GPU.
  const int device = comm::choose_nccl_device(mpi_world);
  if (device < 0) return {nullptr, "MPI with host staging (ranks share a GPU, which NCCL refuses)"};
  if (device != gpu->context().info().index) {
    throw std::logic_error("make_device_world: NCCL would drive GPU " + std::to_string(device) +
                           " but the backend runs on GPU " + std::to_string(gpu->context().info().index));
  }
  comm::NcclOptions options;
  options.device = device;
  options.input_stream = gpu->context().stream();
  options.comm_timeout_s = comm_timeout_s;
  return {comm::make_nccl_communicator(mpi_world, options), "NCCL"};
}

}  // namespace gpt
