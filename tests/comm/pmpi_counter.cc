// The PMPI interposer (see pmpi_counter.h): each wrapper records, then calls the PMPI_ entry point.
#include "tests/comm/pmpi_counter.h"

#include <mpi.h>

#include <mutex>

namespace gpt::comm::pmpi {
namespace {

struct Ledger {
  std::mutex mutex;
  Counts counts;
};

// The one piece of global state: MPI's symbol interposition gives the wrappers nowhere else to write.
Ledger& ledger() {
  static Ledger instance;
  return instance;
}

void record_send(int count, MPI_Datatype type, int dest, MPI_Comm comm) {
  Ledger& l = ledger();
  std::lock_guard lock(l.mutex);
  ++l.counts.send_calls;
  if (dest == MPI_PROC_NULL) return;
  int type_bytes = 0;
  PMPI_Type_size(type, &type_bytes);
  MPI_Group group, world_group;
  PMPI_Comm_group(comm, &group);
  PMPI_Comm_group(MPI_COMM_WORLD, &world_group);
  int world_dest = MPI_UNDEFINED;
  PMPI_Group_translate_ranks(group, 1, &dest, world_group, &world_dest);
  PMPI_Group_free(&group);
  PMPI_Group_free(&world_group);
  if (l.counts.bytes_to.empty()) {
    int world_size = 0;
    PMPI_Comm_size(MPI_COMM_WORLD, &world_size);
    l.counts.bytes_to.assign(world_size, 0);
  }
  l.counts.bytes_to.at(world_dest) += uint64_t(count) * uint64_t(type_bytes);
}

void record_collective() {
  Ledger& l = ledger();
  std::lock_guard lock(l.mutex);
  ++l.counts.collective_calls;
}

}  // namespace

Counts counts() {
  Ledger& l = ledger();
  std::lock_guard lock(l.mutex);
  Counts copy = l.counts;
  if (copy.bytes_to.empty()) {
    int world_size = 0;
    PMPI_Comm_size(MPI_COMM_WORLD, &world_size);
    copy.bytes_to.assign(world_size, 0);
  }
  return copy;
}

void reset() {
  Ledger& l = ledger();
  std::lock_guard lock(l.mutex);
  l.counts = Counts{};
}

}  // namespace gpt::comm::pmpi

using gpt::comm::pmpi::record_collective;
using gpt::comm::pmpi::record_send;

extern "C" {

int MPI_Isend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
              MPI_Request* req) {
  record_send(count, type, dest, comm);
  return PMPI_Isend(buf, count, type, dest, tag, comm, req);
}
int MPI_Issend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
               MPI_Request* req) {
  record_send(count, type, dest, comm);
  return PMPI_Issend(buf, count, type, dest, tag, comm, req);
}
int MPI_Irsend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
               MPI_Request* req) {
  record_send(count, type, dest, comm);
  return PMPI_Irsend(buf, count, type, dest, tag, comm, req);
}
int MPI_Send(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
  record_send(count, type, dest, comm);
  return PMPI_Send(buf, count, type, dest, tag, comm);
}
int MPI_Ssend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
  record_send(count, type, dest, comm);
  return PMPI_Ssend(buf, count, type, dest, tag, comm);
}
int MPI_Sendrecv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, int dest, int sendtag,
                 void* recvbuf, int recvcount, MPI_Datatype recvtype, int source, int recvtag, MPI_Comm comm,
                 MPI_Status* status) {
  record_send(sendcount, sendtype, dest, comm);
  return PMPI_Sendrecv(sendbuf, sendcount, sendtype, dest, sendtag, recvbuf, recvcount, recvtype, source,
                       recvtag, comm, status);
}

int MPI_Allreduce(const void* s, void* r, int n, MPI_Datatype t, MPI_Op op, MPI_Comm comm) {
  record_collective();
  return PMPI_Allreduce(s, r, n, t, op, comm);
}
int MPI_Allgather(const void* s, int sn, MPI_Datatype st, void* r, int rn, MPI_Datatype rt, MPI_Comm comm) {
  record_collective();
  return PMPI_Allgather(s, sn, st, r, rn, rt, comm);
}
int MPI_Reduce_scatter_block(const void* s, void* r, int n, MPI_Datatype t, MPI_Op op, MPI_Comm comm) {
  record_collective();
  return PMPI_Reduce_scatter_block(s, r, n, t, op, comm);
}
int MPI_Alltoall(const void* s, int sn, MPI_Datatype st, void* r, int rn, MPI_Datatype rt, MPI_Comm comm) {
  record_collective();
  return PMPI_Alltoall(s, sn, st, r, rn, rt, comm);
}
int MPI_Alltoallv(const void* s, const int* sn, const int* sd, MPI_Datatype st, void* r, const int* rn,
                  const int* rd, MPI_Datatype rt, MPI_Comm comm) {
  record_collective();
  return PMPI_Alltoallv(s, sn, sd, st, r, rn, rd, rt, comm);
}
int MPI_Bcast(void* data, int n, MPI_Datatype t, int root, MPI_Comm comm) {
  record_collective();
  return PMPI_Bcast(data, n, t, root, comm);
}
int MPI_Barrier(MPI_Comm comm) {
  record_collective();
  return PMPI_Barrier(comm);
}

}  // extern "C"
