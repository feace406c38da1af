// The collective algorithms of the MPI backend (see mpi_collectives.h for what each one does and why).
#include "comm/mpi_collectives.h"

#include <algorithm>
#include <cstring>
#include <memory>

#include "comm/wire_reduce.h"

namespace gpt::comm::mpi {
namespace {

int wrap(int index, int size) {
  return ((index % size) + size) % size;
}

// Chunk j of a ring collective spans [offsets[j], offsets[j + 1]) of the buffer, in bytes or elements.
size_t length(const std::vector<size_t>& offsets, int j) {
  return offsets[j + 1] - offsets[j];
}

// Ring all-gather over byte chunks of buf; this rank's own chunk is already in place. At step s = 0..W-2 rank
// r receives chunk r-s-1 from its left neighbour and sends chunk r-s (its own at s = 0, after that what it
// received at step s-1) to its right one. All receives are posted first, into their final places, and each
// arriving chunk is forwarded at once, so consecutive steps overlap. With report_blocks, every chunk is
// reported to the Request as it becomes final (Request::wait_block), its own first.
Task ring_all_gather(Op& op, char* buf, std::vector<size_t> offsets, bool report_blocks) {
  const int w = op.size(), r = op.rank();
  if (report_blocks) op.block_arrived(r);
  if (w == 1) co_return;
  const int left = wrap(r - 1, w), right = wrap(r + 1, w);
  std::vector<Msg> received(w - 1);
  for (int s = 0; s < w - 1; ++s) {
    const int j = wrap(r - s - 1, w);
    received[s] = op.irecv(left, buf + offsets[j], length(offsets, j));
  }
  op.isend(right, buf + offsets[r], length(offsets, r));
  for (int s = 0; s < w - 1; ++s) {
    co_await op.until(received[s]);
    const int j = wrap(r - s - 1, w);
    // The chunk of the last step belongs to the right neighbour.
    if (s + 1 < w - 1) op.isend(right, buf + offsets[j], length(offsets, j));
    if (report_blocks) op.block_arrived(j);
  }
  co_await op.until_all();
}

// Ring reduce-scatter of send (wire dtype, chunks by element offsets) into out (the accumulation dtype: fp32,
// or fp64 for fp64 data; this rank's chunk, times scale). At step s rank r sends chunk r-s-1 and receives the
// partial sum of chunk r-s-2; it adds its own contribution in the accumulation dtype and sends the rounded
// sum on at step s+1, except at the last step, where the received chunk is its own (r) and the unrounded
// sum is the result. Two receive and two send staging buffers
// let the next receive be posted before the current one is reduced, and a send be in flight while the
// next one is prepared.
Task ring_reduce_scatter(Op& op, const char* send, DType dtype, void* out, std::vector<size_t> offsets,
                         float scale) {
  const int w = op.size(), r = op.rank();
  const size_t elem = dtype_size(dtype);
  auto own = [&](int j) { return send + offsets[j] * elem; };
  if (w == 1) {
    widen_scaled(own(0), out, scale, dtype, length(offsets, 0));
    co_return;
  }
  const int left = wrap(r - 1, w), right = wrap(r + 1, w);
  size_t longest = 0;
  for (int j = 0; j < w; ++j) longest = std::max(longest, length(offsets, j));
  // Uninitialized (every byte is received or computed before it is read); with two ranks only one receive
  // buffer is used and nothing is forwarded, with three one outgoing buffer.
  const size_t buffer = longest * elem;
  const int receive_buffers = std::min(w - 1, 2), send_buffers = std::min(w - 2, 2);
  char* staging = op.scratch((receive_buffers + send_buffers) * buffer);
  char* received[2] = {staging, staging + (receive_buffers - 1) * buffer};
  char* outgoing[2] = {staging + receive_buffers * buffer,
                       staging + (receive_buffers + std::max(send_buffers, 1) - 1) * buffer};
  Msg receive[2], sending[2];

  receive[0] = op.irecv(left, received[0], length(offsets, wrap(r - 2, w)) * elem);
  sending[0] = op.isend(right, own(wrap(r - 1, w)), length(offsets, wrap(r - 1, w)) * elem);
  for (int s = 0; s < w - 1; ++s) {
    const int j = wrap(r - s - 2, w), cur = s % 2, nxt = (s + 1) % 2;
    co_await op.until(receive[cur]);
    if (s == w - 2) {  // j == r: the last contribution is ours, and the sum stays unrounded
      add_final(received[cur], own(j), out, scale, dtype, length(offsets, j));
      break;
    }
    receive[nxt] = op.irecv(left, received[nxt], length(offsets, wrap(r - s - 3, w)) * elem);
    co_await op.until(sending[nxt]);  // the send of step s-1 used outgoing[nxt]
    add_to_wire(received[cur], own(j), outgoing[nxt], dtype, length(offsets, j));
    sending[nxt] = op.isend(right, outgoing[nxt], length(offsets, j) * elem);
  }
  co_await op.until_all();
}

std::vector<size_t> uniform_offsets(int ranks, size_t per_rank) {
  std::vector<size_t> offsets(ranks + 1);
  for (int j = 0; j <= ranks; ++j) offsets[j] = j * per_rank;
  return offsets;
}

}  // namespace

Task all_gather_body(Op& op, const void* send, void* recv, size_t bytes_per_rank) {
  char* mine = static_cast<char*>(recv) + op.rank() * bytes_per_rank;
  if (send != mine && bytes_per_rank > 0) std::memcpy(mine, send, bytes_per_rank);
  co_await ring_all_gather(op, static_cast<char*>(recv), uniform_offsets(op.size(), bytes_per_rank), true);
}

Task reduce_scatter_body(Op& op, const void* send, DType dtype, void* recv, size_t count, float scale) {
  co_await ring_reduce_scatter(op, static_cast<const char*>(send), dtype, recv,
                               uniform_offsets(op.size(), count), scale);
}

Task all_reduce_body(Op& op, void* data, DType dtype, size_t count, float scale) {
  const int w = op.size(), r = op.rank();
  const size_t elem = dtype_size(dtype);
  const size_t chunk = (count + w - 1) / w;  // the last chunks are shorter or empty
  std::vector<size_t> elements(w + 1), bytes(w + 1);
  for (int j = 0; j <= w; ++j) {
    elements[j] = std::min(count, j * chunk);
    bytes[j] = elements[j] * elem;
  }
  const size_t mine = length(elements, r);
  std::unique_ptr<char[]> sum(new char[mine * dtype_size(accumulation_dtype(dtype))]);
  co_await ring_reduce_scatter(op, static_cast<const char*>(data), dtype, sum.get(), elements, scale);
  narrow_to_wire(sum.get(), static_cast<char*>(data) + bytes[r], dtype, mine);
  co_await ring_all_gather(op, static_cast<char*>(data), bytes, false);
}

Task all_to_all_v_body(Op& op, const void* send, std::vector<size_t> send_bytes, void* recv,
                       std::vector<size_t> recv_bytes) {
  const int w = op.size(), r = op.rank();
  std::vector<size_t> send_at(w + 1, 0), recv_at(w + 1, 0);
  for (int p = 0; p < w; ++p) {
    send_at[p + 1] = send_at[p] + send_bytes[p];
    recv_at[p + 1] = recv_at[p] + recv_bytes[p];
  }
  const char* out = static_cast<const char*>(send);
  char* in = static_cast<char*>(recv);
  if (send_bytes[r] > 0) std::memcpy(in + recv_at[r], out + send_at[r], send_bytes[r]);
  std::vector<Msg> received(w);
  for (int k = 1; k < w; ++k) {
    const int from = wrap(r - k, w);
    received[k] = op.irecv(from, in + recv_at[from], recv_bytes[from]);
  }
  for (int k = 1; k < w; ++k) {
    const int to = wrap(r + k, w);
    const Msg sent = op.isend(to, out + send_at[to], send_bytes[to]);
    co_await op.until(sent);
    co_await op.until(received[k]);
  }
  co_await op.until_all();
}

Task broadcast_body(Op& op, void* data, size_t bytes, int root, size_t segment_bytes) {
  const int w = op.size(), r = op.rank();
  if (w == 1 || bytes == 0) co_return;
  const int position = wrap(r - root, w);
  const bool receives = position > 0, forwards = position < w - 1;
  const size_t segment = std::max<size_t>(segment_bytes, 1);
  const size_t segments = (bytes + segment - 1) / segment;
  char* at = static_cast<char*>(data);
  std::vector<Msg> received(segments);
  if (receives) {
    for (size_t k = 0; k < segments; ++k) {
      received[k] = op.irecv(wrap(r - 1, w), at + k * segment, std::min(segment, bytes - k * segment));
    }
  }
  for (size_t k = 0; k < segments; ++k) {
    if (receives) co_await op.until(received[k]);
    if (forwards) op.isend(wrap(r + 1, w), at + k * segment, std::min(segment, bytes - k * segment));
  }
  co_await op.until_all();
}

Task barrier_body(Op& op) {
  const int w = op.size(), r = op.rank();
  for (int distance = 1; distance < w; distance *= 2) {
    const Msg in = op.irecv_token(wrap(r - distance, w));
    op.isend_token(wrap(r + distance, w));
    co_await op.until(in);
  }
  co_await op.until_all();
}

}  // namespace gpt::comm::mpi
