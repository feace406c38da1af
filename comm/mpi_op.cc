// Posting and testing the point-to-point messages of one operation, and resuming its coroutine.
#include "comm/mpi_op.h"

#include <algorithm>
#include <cassert>
#include <climits>

#include "comm/request.h"

namespace gpt::comm::mpi {

Op::Op(const Group& group, Phase phase, TrafficMeter& meter, size_t max_message_bytes, const char* name,
       std::string label)
    : group_(group),
      phase_(phase),
      name_(name),
      label_(std::move(label)),
      meter_(meter),
      max_message_bytes_(std::clamp<size_t>(max_message_bytes, 1, INT_MAX)) {}

void Op::block_arrived(int block) {
  if (completion_) completion_->block_arrived(block);
}

bool Op::advance() {
  if (!started_) {
    started_ = true;
    body_.handle().resume();
    return true;
  }
  if (!waiting_ || !test(awaited_)) return false;
  std::exchange(waiting_, {}).resume();
  return true;
}

bool Op::test(Msg msg) {
  if (msg.count == 0) return true;
  int flag = 0;
  MPI_Testall(static_cast<int>(msg.count), requests_.data() + msg.first, &flag, MPI_STATUSES_IGNORE);
  return flag != 0;
}

std::string Op::describe_wait() const {
  std::string text = std::string(name_) + " (" + phase_name(phase_) + (label_.empty() ? "" : ", " + label_) +
                     ") over " + std::to_string(group_.size) + " ranks";
  if (!started_ || !waiting_) return text + ": not started";
  for (uint32_t i = awaited_.first; i < awaited_.first + awaited_.count; ++i) {
    int done = 0;
    MPI_Request request = requests_[i];
    MPI_Request_get_status(request, &done, MPI_STATUS_IGNORE);
    if (done) continue;
    const Peer& p = peers_[i];
    return text + ": waiting to " + (p.send ? "send to" : "receive from") + " rank " +
           std::to_string(group_.world_ranks[p.rank]);
  }
  return text;
}

Msg Op::post(bool send, int peer, void* data, size_t bytes) {
  assert(peer != group_.rank && peer >= 0 && peer < group_.size);
  Msg msg{static_cast<uint32_t>(requests_.size()), 0};
  // MPI counts are int: a payload above max_message_bytes goes as consecutive segments, which both sides
  // cut identically and which MPI keeps in order (same source, tag and communicator).
  auto* bytes_at = static_cast<char*>(data);
  for (size_t offset = 0; offset < bytes; offset += max_message_bytes_) {
    const int n = static_cast<int>(std::min(max_message_bytes_, bytes - offset));
    requests_.push_back(MPI_REQUEST_NULL);
    peers_.push_back({peer, send});
    if (send) {
      MPI_Isend(bytes_at + offset, n, MPI_BYTE, peer, tag_, group_.comm, &requests_.back());
    } else {
      MPI_Irecv(bytes_at + offset, n, MPI_BYTE, peer, tag_, group_.comm, &requests_.back());
    }
  }
  msg.count = static_cast<uint32_t>(requests_.size()) - msg.first;
  return msg;
}

Msg Op::isend(int peer, const void* data, size_t bytes) {
  if (bytes > 0) meter_.record_send(phase_, group_.link_to[peer], bytes);
  return post(true, peer, const_cast<void*>(data), bytes);
}

Msg Op::irecv(int peer, void* data, size_t bytes) {
  return post(false, peer, data, bytes);
}

Msg Op::isend_token(int peer) {
  assert(peer != group_.rank);
  requests_.push_back(MPI_REQUEST_NULL);
  peers_.push_back({peer, true});
  MPI_Isend(nullptr, 0, MPI_BYTE, peer, tag_, group_.comm, &requests_.back());
  return Msg{static_cast<uint32_t>(requests_.size() - 1), 1};
}

Msg Op::irecv_token(int peer) {
  assert(peer != group_.rank);
  requests_.push_back(MPI_REQUEST_NULL);
  peers_.push_back({peer, false});
  MPI_Irecv(nullptr, 0, MPI_BYTE, peer, tag_, group_.comm, &requests_.back());
  return Msg{static_cast<uint32_t>(requests_.size() - 1), 1};
}

}  // namespace gpt::comm::mpi
