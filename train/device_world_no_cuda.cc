// make_device_world in a build without the CUDA backend: always the MPI world.
#include "train/device_world.h"

namespace gpt {

DeviceWorld make_device_world(comm::Communicator& /*mpi_world*/, Ops* /*backend*/, double /*comm_timeout_s*/,
                              bool /*host_uses_wire*/) {
  return {nullptr, "MPI"};
}

}  // namespace gpt
