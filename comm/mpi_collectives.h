// Internal to the MPI backend: the collective algorithms, each a coroutine over one Op's point-to-point
// messages. Arguments are copied into the coroutine frame (the caller's vectors may go away); buffers belong
// to the operation until it completes. Algorithms, with W ranks in rank order:
// - all-gather: ring; W-1 steps, each rank forwards to rank+1 what it received from rank-1 the step before.
// - reduce-scatter: ring; chunk j starts at rank j+1 and travels up the ring collecting every rank's chunk j,
//   partial sums in the wire dtype, each addition in fp32; rank j adds its own last and keeps the fp32
//   result.
// - all-reduce: that reduce-scatter over ceil(count/W)-element chunks, each owner rounds its chunk to the
//   wire dtype once, then the ring all-gather of the chunks (so every rank ends with the same bits).
// - all-to-all(v): pairwise; at step k = 1..W-1 rank r sends to r+k and receives from r-k (receives are
//   posted up front); its own block is a local copy.
// - broadcast: a pipelined chain root -> root+1 -> ... in rank order, cut into segments so that every link
//   streams at once; each non-root rank receives the payload once and all but the last forward it once, so
//   W-1 copies of the payload cross links in all, the minimum (a binomial tree sends as much in all but
//   makes the root send log2(W) copies itself, which is slower for the large payloads we broadcast).
// - barrier: dissemination; ceil(log2 W) rounds of zero-byte messages to rank + 2^k.
#pragma once

#include <cstddef>
#include <vector>

#include "comm/mpi_op.h"
#include "tensor/tensor.h"

namespace gpt::comm::mpi {

Task all_gather_body(Op& op, const void* send, void* recv, size_t bytes_per_rank);
Task reduce_scatter_body(Op& op, const void* send, DType dtype, void* recv, size_t count, float scale);
Task all_reduce_body(Op& op, void* data, DType dtype, size_t count, float scale);
Task all_to_all_v_body(Op& op, const void* send, std::vector<size_t> send_bytes, void* recv,
                       std::vector<size_t> recv_bytes);
Task broadcast_body(Op& op, void* data, size_t bytes, int root, size_t segment_bytes);
Task barrier_body(Op& op);

}  // namespace gpt::comm::mpi
