// MPI implementation of Comm: collectives on host tensors, counted in CommStats.
#include "parallel/mpi_comm.h"

#include "parallel/grid.h"

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

namespace dit {

namespace {

MPI_Datatype mpi_type(const Tensor& t) {
  DIT_CHECK(t.device == Device::Host, "MPI communication needs host tensors");
  switch (t.dtype) {
    case DType::F32: return MPI_FLOAT;
    case DType::I32: return MPI_INT;
    default: DIT_FAIL("MPI communication of ", dtype_name(t.dtype), " tensors is not supported");
  }
}

int count_of(const Tensor& t) {
  DIT_CHECK(t.numel() <= std::int64_t(2147483647), "an MPI message of ", t.numel(),
            " elements exceeds MPI's int count");
  return static_cast<int>(t.numel());
}

}  // namespace

namespace {
// DIT_MPI_WAIT=yield: waiting ranks poll and yield their core instead of blocking inside MPI
// (which spins). Meant for runs with more ranks than cores; measured on the demo it was not
// consistently faster, so spinning stays the default.
bool yield_while_waiting() {
  const char* v = std::getenv("DIT_MPI_WAIT");
  return v && std::string(v) == "yield";
}
}  // namespace

bool mpi_running() {
  int inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  return inited && !finalized;
}

int node_count() {
  MPI_Comm local;
  DIT_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local));
  int local_rank = 0, leaders = 0;
  MPI_Comm_rank(local, &local_rank);
  MPI_Comm_free(&local);
  int leader = local_rank == 0 ? 1 : 0;
  DIT_MPI_CHECK(MPI_Allreduce(&leader, &leaders, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
  return leaders;
}

MpiComm::MpiComm(MPI_Comm comm, bool owned) : comm_(comm), owned_(owned) {
  DIT_MPI_CHECK(MPI_Comm_size(comm_, &size_));
  DIT_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  yield_ = yield_while_waiting();
}

void MpiComm::complete(MPI_Request& r) {
  if (!yield_) {
    DIT_MPI_CHECK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    return;
  }
  int done = 0;
  while (true) {
    DIT_MPI_CHECK(MPI_Test(&r, &done, MPI_STATUS_IGNORE));
    if (done) return;
    std::this_thread::yield();
  }
}

MpiComm::~MpiComm() {
  if (owned_) MPI_Comm_free(&comm_);
}

std::unique_ptr<MpiComm> MpiComm::world() {
  return std::unique_ptr<MpiComm>(new MpiComm(MPI_COMM_WORLD, false));
}

std::unique_ptr<MpiComm> MpiComm::split(const Comm& parent, int color, int key) {
  const auto* p = dynamic_cast<const MpiComm*>(&parent);
  DIT_CHECK(p, "MpiComm::split needs an MPI parent communicator");
  MPI_Comm c;
  DIT_MPI_CHECK(MPI_Comm_split(p->comm_, color, key, &c));
  return std::unique_ptr<MpiComm>(new MpiComm(c, true));
}

void MpiComm::all_reduce_sum(const Tensor& x) {
  if (size_ == 1) return;
  CallTimer t(stats_, ring_all_reduce_bytes(x.bytes(), size_));
  MPI_Request r;
  DIT_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, x.data, count_of(x), mpi_type(x), MPI_SUM, comm_, &r));
  complete(r);
}

void MpiComm::all_gather(const Tensor& in, const Tensor& out) {
  DIT_CHECK(out.numel() == in.numel() * size_ && in.dtype == out.dtype, "all_gather: ",
            in.shape.str(), " from each of ", size_, " ranks does not fill ", out.shape.str());
  const auto* block = static_cast<const char*>(out.data) + in.bytes() * rank_;
  CallTimer t(stats_, ring_gather_scatter_bytes(out.bytes(), size_));
  MPI_Request r;
  if (in.data == block)
    DIT_MPI_CHECK(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, out.data, count_of(in),
                                 mpi_type(out), comm_, &r));
  else
    DIT_MPI_CHECK(MPI_Iallgather(in.data, count_of(in), mpi_type(in), out.data, count_of(in),
                                 mpi_type(out), comm_, &r));
  complete(r);
}

void MpiComm::reduce_scatter_sum(const Tensor& in, const Tensor& out) {
  DIT_CHECK(in.numel() == out.numel() * size_ && in.dtype == out.dtype, "reduce_scatter: ",
            in.shape.str(), " does not split into ", size_, " blocks of ", out.shape.str());
  CallTimer t(stats_, ring_gather_scatter_bytes(in.bytes(), size_));
  MPI_Request r;
  DIT_MPI_CHECK(MPI_Ireduce_scatter_block(in.data, out.data, count_of(out), mpi_type(in), MPI_SUM,
                                          comm_, &r));
  complete(r);
}

void MpiComm::broadcast(const Tensor& x, int root) {
  if (size_ == 1) return;
  CallTimer t(stats_, rank_ == root ? x.bytes() : 0);
  DIT_MPI_CHECK(MPI_Bcast(x.data, count_of(x), mpi_type(x), root, comm_));
}

void MpiComm::barrier() { DIT_MPI_CHECK(MPI_Barrier(comm_)); }

double MpiComm::all_reduce_max(double v) {
  double out = v;
  DIT_MPI_CHECK(MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, MPI_MAX, comm_));
  return out;
}

void MpiComm::all_reduce_sum(double* v, int n) {
  if (size_ == 1) return;
  DIT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_SUM, comm_));
}

Request MpiComm::isend(const Tensor& x, int peer, int tag) {
  CallTimer t(stats_, x.bytes());
  MPI_Request r;
  DIT_MPI_CHECK(MPI_Isend(x.data, count_of(x), mpi_type(x), peer, tag, comm_, &r));
  requests_[next_request_] = r;
  return Request{next_request_++};
}

Request MpiComm::irecv(const Tensor& x, int peer, int tag) {
  CallTimer t(stats_, 0);
  MPI_Request r;
  DIT_MPI_CHECK(MPI_Irecv(x.data, count_of(x), mpi_type(x), peer, tag, comm_, &r));
  requests_[next_request_] = r;
  return Request{next_request_++};
}

void MpiComm::wait(Request& req) {
  if (!req.pending()) return;
  auto it = requests_.find(req.id);
  DIT_CHECK(it != requests_.end(), "wait on an unknown request ", req.id);
  CallTimer t(stats_, 0);
  --stats_.calls;
  complete(it->second);
  requests_.erase(it);
  req.id = -1;
}

}  // namespace dit
