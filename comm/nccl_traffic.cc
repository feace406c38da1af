// NCCL's ring algorithms' payload bytes by sender and link class (the model is described in nccl_traffic.h).
#include "comm/nccl_traffic.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace gpt::comm {

void record(TrafficMeter& meter, Phase phase, const LinkBytes& bytes) {
  if (bytes.intra > 0) meter.record_send(phase, Link::kIntraNode, bytes.intra);
  if (bytes.inter > 0) meter.record_send(phase, Link::kInterNode, bytes.inter);
}

RingTraffic::RingTraffic(const Topology& topology, std::vector<int> world_ranks, std::vector<int> ring)
    : topology_(topology), world_ranks_(std::move(world_ranks)) {
  const int n = size();
  if (ring.empty()) {
    for (int r = 0; r < n; ++r) ring.push_back(r);
  }
  position_.assign(n, -1);
  if (static_cast<int>(ring.size()) != n) {
    throw std::invalid_argument("comm: a ring of " + std::to_string(ring.size()) + " ranks over a group of " +
                                std::to_string(n));
  }
  for (int p = 0; p < n; ++p) {
    if (ring[p] < 0 || ring[p] >= n || position_[ring[p]] != -1) {
      throw std::invalid_argument("comm: the ring is not a permutation of the group's ranks");
    }
    position_[ring[p]] = p;
  }
  successor_link_.resize(n);
  for (int p = 0; p < n; ++p) successor_link_[ring[p]] = link_between(ring[p], ring[(p + 1) % n]);
}

Link RingTraffic::link_between(int from, int to) const {
  return topology_.node_of(world_ranks_[from]) == topology_.node_of(world_ranks_[to]) ? Link::kIntraNode
                                                                                      : Link::kInterNode;
}

LinkBytes RingTraffic::to_successor(int rank, uint64_t bytes) const {
  LinkBytes sent;
  if (size() > 1) sent.add(successor_link_[rank], bytes);
  return sent;
}

LinkBytes RingTraffic::all_gather(int rank, uint64_t bytes_per_rank) const {
  return to_successor(rank, uint64_t(size() - 1) * bytes_per_rank);
}

LinkBytes RingTraffic::reduce_scatter(int rank, uint64_t count, uint64_t element_bytes) const {
  return to_successor(rank, uint64_t(size() - 1) * count * element_bytes);
}

LinkBytes RingTraffic::all_reduce(int rank, uint64_t count, uint64_t element_bytes) const {
  const uint64_t n = size();
  const uint64_t chunk = (count + n - 1) / n;
  auto chunk_length = [&](uint64_t j) {
    return std::min(count, (j + 1) * chunk) - std::min(count, j * chunk);
  };
  const uint64_t p = position_[rank];
  const uint64_t elements = (count - chunk_length(p)) + (count - chunk_length((p + 1) % n));
  return to_successor(rank, elements * element_bytes);
}

LinkBytes RingTraffic::broadcast(int rank, uint64_t bytes, int root) const {
  const int n = size();
  const int steps_from_root = ((position_[rank] - position_[root]) % n + n) % n;
  return to_successor(rank, steps_from_root < n - 1 ? bytes : 0);
}

LinkBytes RingTraffic::all_to_all_v(int rank, const std::vector<size_t>& send_bytes) const {
  LinkBytes sent;
  for (int peer = 0; peer < size() && peer < static_cast<int>(send_bytes.size()); ++peer) {
    if (peer != rank) sent.add(link_between(rank, peer), send_bytes[peer]);
  }
  return sent;
}

}  // namespace gpt::comm
