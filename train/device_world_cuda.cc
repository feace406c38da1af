// make_device_world in a build with the CUDA backend: NCCL when every rank has a GPU of its own. The CMake
// build of a GPU machine without NCCL's headers (scripts/gpu_check) defines GPT_WITHOUT_NCCL: its GPU ranks
// then stay on MPI with host staging.
#include <stdexcept>
#include <string>

#ifndef GPT_WITHOUT_NCCL
#include "comm/nccl_communicator.h"
#endif
#include "kernels/cuda/cuda_ops.h"
#include "train/device_world.h"

namespace gpt {

DeviceWorld make_device_world(comm::Communicator& mpi_world, Ops* backend, double comm_timeout_s,
                              bool host_uses_wire) {
  auto* gpu = dynamic_cast<cuda::CudaOps*>(backend);
  if (!gpu) return {nullptr, "MPI"};
#ifdef GPT_WITHOUT_NCCL
  (void)mpi_world;
  (void)comm_timeout_s;
  (void)host_uses_wire;
  return {nullptr, "MPI with host staging (built without NCCL)"};
#else
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
  std::unique_ptr<comm::Communicator> nccl = comm::make_nccl_communicator(mpi_world, options);
  // NCCL reads and writes the wire buffers on the GPU: in device memory they never cross PCIe. MPI with host
  // staging above, and a run whose host code touches them, keep them pinned host memory.
  if (host_uses_wire) return {std::move(nccl), "NCCL (wire buffers in pinned host memory: offload)"};
  gpu->keep_wire_memory_on_device();
  return {std::move(nccl), "NCCL (wire buffers in device memory)"};
#endif
}

}  // namespace gpt
