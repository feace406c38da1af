// The NCCL backend of Communicator (CUDA builds only): every collective is an NCCL call on the communicator's
// own non-blocking CUDA stream, so communication overlaps compute on the GPU without a host thread moving
// bytes. The MPI communicator stays underneath for setup: it carries each group's ncclUniqueId from the
// group's first member to the others (comm/nccl_groups.h), and it is the one the traffic meter belongs to.
//
// Design:
// - One NCCL communicator, one stream and one completion thread per Communicator (world and each subgroup).
//   Operations on one Communicator are enqueued under a mutex, so they reach NCCL in issue order from any
//   thread; different Communicators use different streams and run concurrently.
// - Inputs: when options.input_stream is set (the compute stream, e.g. the CUDA backend's Context::stream()),
//   each operation first makes its stream wait for the work already enqueued there, so a buffer written by an
//   earlier kernel is complete before NCCL reads it, and a kernel issued earlier that still reads a buffer
//   the operation overwrites has finished too; orders_after_device_work() says so (true then), and the
//   engine issues the operation without synchronizing the device first (zero/context.h). Outputs: a Request
//   completes once a CUDA event recorded after the operation has fired; the completion thread polls the
//   events in order (a short spin, then sleeps of at most options.max_poll_sleep_us), so after wait() the
//   host and any stream may use the output. wait() blocks the host until then (no stream waits on the
//   operation's event instead): ops issued after it are ordered after the operation by the host's wait.
// - Buffers are device pointers or mapped pinned host pointers (NCCL reads them through unified addressing).
//   Pageable host memory (a std::vector, say sum_over_ranks' words) is staged through device memory; such an
//   operation returns only when it is complete (the copy back to pageable memory waits), so use it for small
//   setup and metrics traffic only.
// - Reductions: NCCL adds in the wire dtype. For f32 and f64 wire that is the accumulation dtype anyway:
//   reduce_scatter sums straight into recv (in place allowed) and multiplies by scale afterwards. For fp16
//   and bf16 wire, NCCL sums into a device scratch buffer in the wire dtype (ncclSum) and a kernel widens the
//   sum to fp32 and multiplies by scale; the bytes on the wire stay 16-bit, as with MPI. Difference from the
//   MPI backend, which widens every partial sum and adds in fp32, rounding to the wire dtype once per hop:
//   each NCCL hop rounds to the wire dtype too (fp32 has enough bits that an fp32 add rounded to fp16/bf16
//   equals the correctly rounded fp16/bf16 add, so hops agree), but NCCL also rounds the final sum to the
//   wire dtype, where MPI keeps it in fp32: up to half a wire ulp more error per element. NCCL's reduction
//   order follows its own rings and channels, not our rank order, so the bits differ from the MPI backend's;
//   for a fixed job configuration (ranks, topology, NCCL version and settings) NCCL's order is fixed, so
//   reruns agree. Not chosen: ncclAvg or ncclRedOpCreatePreMulSum (they scale each input before the sum, in
//   the wire dtype: small fp16 gradients lose bits or flush to zero, and scale need not be 1/size); widening
//   to fp32 before NCCL (twice the bytes on the wire, which is what 16-bit gradients are there to save).
//   all_reduce is ncclAllReduce in the wire dtype, then, when scale != 1, data = to_wire(data * scale) (the
//   MPI backend rounds the scaled fp32 sum once; here the sum is rounded, then the product).
// - Metering: NCCL's bytes are invisible to us, so each call records what NCCL's ring algorithm sends from
//   this rank (comm/nccl_traffic.h, the rank-order ring) under the call's phase, when it is issued.
// - barrier() is a one-element ncclAllReduce (it moves a few bytes, counted in kOther).
// - Failures: an NCCL or CUDA error reported asynchronously fails every pending Request (wait() throws
//   std::runtime_error) and every later call; with options.comm_timeout_s > 0 an operation that has not
//   completed in that time prints one line and ends the job (abort_job(3)), like the MPI watchdog.
// - subgroup() (setup only) waits for this communicator's operations, builds the members' MPI subgroup,
// shares
//   the id made by the first member over it, and calls ncclCommInitRank on every member. NCCL kernels of
//   different communicators may occupy the GPU at once; NCCL only guarantees progress for them when ranks
//   issue them in a consistent order, which the training loop does (one gather and one reduction stream).
#pragma once

#include <cuda_runtime_api.h>

#include <memory>

#include "comm/communicator.h"

namespace gpt::comm {

struct NcclOptions {
  int device = 0;  // the CUDA device this rank drives (comm/nccl_groups.h: device_of_rank)
  cudaStream_t input_stream = nullptr;  // whose earlier work writes the inputs; nullptr: nothing to wait for
  double comm_timeout_s = 0;            // watchdog (gpt_train's --comm-timeout); 0 = off
  int spin_polls = 64;                  // completion thread: event polls before it starts sleeping
  int max_poll_sleep_us = 20;           // the longest sleep between polls while an operation is pending
};

// The NCCL communicator over host's ranks (the same members, ranks and topology; host's meter). Collective
// over host: every member calls it. host (the MPI world, typically) must outlive the result and all its
// subgroups, which also build their MPI subgroups from it. Throws std::runtime_error naming the failed
// CUDA or NCCL call.
std::unique_ptr<Communicator> make_nccl_communicator(Communicator& host, const NcclOptions& options);

// Collective over host, for choosing between NCCL and MPI the same way on every rank: the device this rank
// should pass as NcclOptions::device (comm/nccl_groups.h's device_of_rank), or -1 on every rank when NCCL
// cannot be used: some rank sees no GPU, or two ranks would drive the same physical GPU (device UUIDs
// gathered over host; this also catches launchers that give each rank its own CUDA_VISIBLE_DEVICES).
int choose_nccl_device(Communicator& host);

}  // namespace gpt::comm
