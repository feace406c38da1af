// The argument checks every Communicator backend makes before it sends anything (MPI's and NCCL's alike), so
// a caller's mistake gives the same std::invalid_argument on either.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <vector>

#include "tensor/tensor.h"

namespace gpt::comm {

// A reduction's wire dtype must be one we add in (comm/wire_reduce.h).
void require_reducible(DType dtype, const char* what);
// No buffer may be null when amount (bytes or elements) is not zero.
void require_buffers(size_t amount, std::initializer_list<const void*> buffers, const char* what);

// all_to_all_v's sizes for a group of group_size ranks, this one `rank`: one send and one receive size per
// rank, and the bytes to itself the same both ways. Returns the bytes sent and received in all.
struct AllToAllTotals {
  size_t sent = 0, received = 0;
};
AllToAllTotals check_all_to_all_v(int rank, int group_size, const std::vector<size_t>& send_bytes,
                                  const std::vector<size_t>& recv_bytes);

}  // namespace gpt::comm
