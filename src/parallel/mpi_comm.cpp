// MPI implementation of Comm: collectives on host tensors, counted in CommStats. Collectives use
// the non-blocking MPI calls and every wait polls with the watchdog's deadline (watchdog.h).
#include "parallel/mpi_comm.h"

#include "parallel/grid.h"

#include <chrono>
#include <cstdio>
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
// (which spins). Meant for runs with more ranks than cores; the gain depends on how busy the
// cores are, so spinning, MPI's own behaviour, stays the default.
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

MpiComm::MpiComm(MPI_Comm comm, bool owned, std::shared_ptr<CommWatch> watch, std::string name)
    : comm_(comm), owned_(owned), watch_(std::move(watch)), name_(std::move(name)) {
  DIT_MPI_CHECK(MPI_Comm_size(comm_, &size_));
  DIT_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  yield_ = yield_while_waiting();
  if (!watch_) watch_ = std::make_shared<CommWatch>();
  MPI_Group mine, world;
  DIT_MPI_CHECK(MPI_Comm_group(comm_, &mine));
  DIT_MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world));
  std::vector<int> local(static_cast<std::size_t>(size_));
  for (int i = 0; i < size_; ++i) local[static_cast<std::size_t>(i)] = i;
  world_ranks_.resize(local.size());
  DIT_MPI_CHECK(MPI_Group_translate_ranks(mine, size_, local.data(), world, world_ranks_.data()));
  MPI_Group_free(&mine);
  MPI_Group_free(&world);
}

void MpiComm::complete(MPI_Request& r, const Wait& what) {
  const double limit = watch_->timeout_s > 0 ? watch_->limit_s() : 0;
  if (limit <= 0 && !yield_ && !watch_->stop_signal) {
    DIT_MPI_CHECK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    return;
  }
  int done = 0;
  DIT_MPI_CHECK(MPI_Test(&r, &done, MPI_STATUS_IGNORE));
  if (done) return;
  const auto t0 = std::chrono::steady_clock::now();
  for (unsigned polls = 1;; ++polls) {
    DIT_MPI_CHECK(MPI_Test(&r, &done, MPI_STATUS_IGNORE));
    if (done) return;
    if (yield_) std::this_thread::yield();
    if (polls % 256 == 0) {  // reading the clock on every poll would cost more than the poll
      const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if ((limit > 0 && waited > limit) || (watch_->stopping() && waited > CommWatch::kStopGrace))
        timed_out(what, waited);
    }
  }
}

std::string MpiComm::group() const {
  std::string s = (name_.empty() ? "a group" : "the " + name_ + " group") + " (world ranks ";
  for (int i = 0; i < size_; ++i) s += (i ? ", " : "") + std::to_string(world_ranks_[static_cast<std::size_t>(i)]);
  return s + ")";
}

void MpiComm::timed_out(const Wait& w, double waited) const {
  char secs[64];
  std::snprintf(secs, sizeof secs, "%.1f s (parallel.timeout_s = %g", waited, watch_->timeout_s);
  std::string limit = secs;
  if (watch_->stopping()) limit += ", or " + std::to_string(int(CommWatch::kStopGrace)) + " s after a stop signal";
  if (watch_->factor != 1) limit += ", x" + std::to_string(int(watch_->factor)) + " during " + watch_->phase;
  limit += ")";
  if (w.peer >= 0) {
    const int peer = world_ranks_[static_cast<std::size_t>(w.peer)];
    DIT_FAIL("communication timeout: waited ", limit, " for the ", w.op, " (tag ", w.tag, ") ",
             std::string(w.op) == "send" ? "to" : "from", " world rank ", peer, " over ", group(), " during ",
             watch_->where(), "; rank ", peer, " stopped making progress (stopped, hung, or cut off from this one)");
  }
  DIT_FAIL("communication timeout: waited ", limit, " in ", w.op, " over ", group(), " during ", watch_->where(),
           "; a rank of that group stopped making progress (stopped, hung, or cut off)");
}

MpiComm::~MpiComm() {
  if (owned_) MPI_Comm_free(&comm_);
}

std::unique_ptr<MpiComm> MpiComm::world(std::shared_ptr<CommWatch> watch) {
  return std::unique_ptr<MpiComm>(new MpiComm(MPI_COMM_WORLD, false, std::move(watch), "world"));
}

std::unique_ptr<MpiComm> MpiComm::split(const Comm& parent, int color, int key, const std::string& name) {
  const auto* p = dynamic_cast<const MpiComm*>(&parent);
  DIT_CHECK(p, "MpiComm::split needs an MPI parent communicator");
  MPI_Comm c;
  DIT_MPI_CHECK(MPI_Comm_split(p->comm_, color, key, &c));
  return std::unique_ptr<MpiComm>(new MpiComm(c, true, p->watch_, name));
}

void MpiComm::all_reduce_sum(const Tensor& x) {
  if (size_ == 1) return;
  CallTimer t(stats_, ring_all_reduce_bytes(x.bytes(), size_));
  MPI_Request r;
  DIT_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, x.data, count_of(x), mpi_type(x), MPI_SUM, comm_, &r));
  complete(r, {"all-reduce"});
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
  complete(r, {"all-gather"});
}

void MpiComm::reduce_scatter_sum(const Tensor& in, const Tensor& out) {
  DIT_CHECK(in.numel() == out.numel() * size_ && in.dtype == out.dtype, "reduce_scatter: ",
            in.shape.str(), " does not split into ", size_, " blocks of ", out.shape.str());
  CallTimer t(stats_, ring_gather_scatter_bytes(in.bytes(), size_));
  MPI_Request r;
  DIT_MPI_CHECK(MPI_Ireduce_scatter_block(in.data, out.data, count_of(out), mpi_type(in), MPI_SUM,
                                          comm_, &r));
  complete(r, {"reduce-scatter"});
}

void MpiComm::broadcast(const Tensor& x, int root) {
  if (size_ == 1) return;
  CallTimer t(stats_, rank_ == root ? x.bytes() : 0);
  MPI_Request r;
  DIT_MPI_CHECK(MPI_Ibcast(x.data, count_of(x), mpi_type(x), root, comm_, &r));
  complete(r, {"broadcast"});
}

void MpiComm::barrier() {
  MPI_Request r;
  DIT_MPI_CHECK(MPI_Ibarrier(comm_, &r));
  complete(r, {"barrier"});
}

double MpiComm::all_reduce_max(double v) {
  double out = v;
  MPI_Request r;
  DIT_MPI_CHECK(MPI_Iallreduce(&v, &out, 1, MPI_DOUBLE, MPI_MAX, comm_, &r));
  complete(r, {"all-reduce (max)"});
  return out;
}

void MpiComm::all_reduce_sum(double* v, int n) {
  if (size_ == 1) return;
  MPI_Request r;
  DIT_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_SUM, comm_, &r));
  complete(r, {"all-reduce (host values)"});
}

Request MpiComm::isend(const Tensor& x, int peer, int tag) {
  CallTimer t(stats_, x.bytes());
  MPI_Request r;
  DIT_MPI_CHECK(MPI_Isend(x.data, count_of(x), mpi_type(x), peer, tag, comm_, &r));
  requests_[next_request_] = Pending{r, {"send", peer, tag}};
  return Request{next_request_++};
}

Request MpiComm::irecv(const Tensor& x, int peer, int tag) {
  CallTimer t(stats_, 0);
  MPI_Request r;
  DIT_MPI_CHECK(MPI_Irecv(x.data, count_of(x), mpi_type(x), peer, tag, comm_, &r));
  requests_[next_request_] = Pending{r, {"message", peer, tag}};
  return Request{next_request_++};
}

void MpiComm::wait(Request& req) {
  if (!req.pending()) return;
  auto it = requests_.find(req.id);
  DIT_CHECK(it != requests_.end(), "wait on an unknown request ", req.id);
  CallTimer t(stats_, 0);
  --stats_.calls;
  complete(it->second.request, it->second.what);
  requests_.erase(it);
  req.id = -1;
}

}  // namespace dit
