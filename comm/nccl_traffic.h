// The traffic meter's view of NCCL: NCCL moves the bytes itself, so nothing sees them leave; instead the
// NCCL communicator records, when it issues a call, the payload bytes that NCCL's ring algorithms send from
// this rank, by link class, computed here from the elements passed to the call and the ring order.
//
// The model, per collective (n ranks on the ring, each rank sends only to its ring successor):
// - all-gather of b bytes per rank: n-1 steps, each forwarding one rank's b bytes: (n-1)*b per rank.
// - reduce-scatter of n*c elements: n-1 steps of one c-element chunk (a partial sum in the wire dtype):
//   (n-1)*c elements per rank.
// - all-reduce of E elements: NCCL's ring all-reduce is a reduce-scatter ring then an all-gather ring over
//   ceil(E/n)-element chunks (the last ones shorter or empty), so 2(n-1)/n of the data per rank when n
//   divides E. The rank at ring position p owns chunk p after the reduce-scatter: it sends every chunk but p
//   in the first pass and every chunk but p+1 in the second. With the rank-order ring this is exactly what
//   our MPI all-reduce sends, rank by rank.
// - broadcast: a chain along the ring from the root; every rank but the root's predecessor forwards the
//   whole payload once (n-1 copies in all), like the MPI backend's pipelined chain.
// - all-to-all(v) as grouped ncclSend/ncclRecv: each block goes straight to its destination; the self block
//   is a local copy and not traffic. Identical to the MPI backend.
// So for the same collective and the rank-order ring the totals (and the per-rank bytes) equal the MPI
// backend's closed forms. Where real NCCL differs from this model (the meter counts payload, as for MPI):
// - NCCL picks its own rings from the hardware topology, several of them (channels), each carrying part of
//   the data. Rings that visit each node's ranks contiguously (what NCCL builds) cross node boundaries as
//   often as the rank-order ring, so the totals per link class hold; the split between the ranks of a node
//   can differ. The model takes the ring as an argument to show this (tests/comm/nccl_traffic_test.cc).
// - NCCL may choose the tree, NVLS or CollNet algorithms instead of the ring (NCCL_ALGO=Ring forces rings);
//   a tree all-reduce sends the same total but splits it differently between the link classes.
// - The LL and LL128 protocols put flags beside the payload on the wire (LL doubles small messages); those
//   bytes are protocol overhead, not payload, and are not counted.
// - Chunk boundaries inside NCCL follow its channel and alignment rules, so for element counts not divisible
//   by n the per-rank split of an all-reduce can differ by a few elements; the total over ranks cannot.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "comm/communicator.h"
#include "comm/traffic.h"

namespace gpt::comm {

// Bytes that one rank sends, by link class.
struct LinkBytes {
  uint64_t intra = 0;
  uint64_t inter = 0;

  void add(Link link, uint64_t bytes) { (link == Link::kIntraNode ? intra : inter) += bytes; }
  uint64_t total() const { return intra + inter; }
  LinkBytes& operator+=(const LinkBytes& other) {
    intra += other.intra;
    inter += other.inter;
    return *this;
  }
  bool operator==(const LinkBytes&) const = default;
};

// Adds the bytes to the meter under the phase (nothing for zero bytes).
void record(TrafficMeter& meter, Phase phase, const LinkBytes& bytes);

// The ring over one group, and the bytes each of its ranks sends in NCCL's ring collectives.
class RingTraffic {
 public:
  // world_ranks: the group's world ranks in group-rank order. ring: its group ranks in ring order (each sends
  // to the next, the last to the first); empty means rank order. A link's class comes from the topology's
  // nodes of the two world ranks. Throws std::invalid_argument if ring is not a permutation of the ranks.
  RingTraffic(const Topology& topology, std::vector<int> world_ranks, std::vector<int> ring = {});

  int size() const { return static_cast<int>(world_ranks_.size()); }
  // The class of the link from group rank `rank` to its ring successor.
  Link link_to_successor(int rank) const { return successor_link_[rank]; }

  // What group rank `rank` sends in each collective (arguments as in Communicator).
  LinkBytes all_gather(int rank, uint64_t bytes_per_rank) const;
  LinkBytes reduce_scatter(int rank, uint64_t count, uint64_t element_bytes) const;
  LinkBytes all_reduce(int rank, uint64_t count, uint64_t element_bytes) const;
  LinkBytes broadcast(int rank, uint64_t bytes, int root) const;
  LinkBytes all_to_all_v(int rank, const std::vector<size_t>& send_bytes) const;

 private:
  LinkBytes to_successor(int rank, uint64_t bytes) const;
  Link link_between(int from, int to) const;

  Topology topology_;
  std::vector<int> world_ranks_;
  std::vector<int> position_;  // ring position of each group rank
  std::vector<Link> successor_link_;
};

}  // namespace gpt::comm
