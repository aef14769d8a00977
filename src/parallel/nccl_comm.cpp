// NCCL implementation of Comm (see nccl_comm.h): collectives on the backend's stream, pipeline
// point-to-point on four lanes (two-rank communicators with streams of their own), host tensors
// through the wrapped MpiComm.
#include "parallel/nccl_comm.h"

#include <algorithm>

#include "core/error.h"

namespace dit {

int p2p_lane(int from, int to) {
  DIT_CHECK(from >= 0 && to >= 0 && (from - to == 1 || to - from == 1),
            "NCCL point-to-point connects pipeline neighbours only, not rank ", from, " to rank ",
            to);
  return 2 * (std::min(from, to) % 2) + (to < from ? 1 : 0);
}

}  // namespace dit

#ifdef DIT_HAVE_CUDA

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"

namespace dit {

namespace {

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::F32: return ncclFloat32;
    case DType::BF16: return ncclBfloat16;
    case DType::F16: return ncclFloat16;
    case DType::I32: return ncclInt32;
  }
  DIT_FAIL("NCCL communication of ", dtype_name(t), " tensors is not supported");
}

std::size_t count_of(const Tensor& t) { return static_cast<std::size_t>(t.numel()); }


// Byte ranges [a, a + an) and [b, b + bn) intersect.
bool overlap(const void* a, std::size_t an, const void* b, std::size_t bn) {
  const auto x = reinterpret_cast<std::uintptr_t>(a), y = reinterpret_cast<std::uintptr_t>(b);
  return an > 0 && bn > 0 && x < y + bn && y < x + an;
}

// Teardown never throws: it reports and goes on (the process is usually ending).
void report(const char* what, ncclResult_t rc) {
  if (rc != ncclSuccess)
    std::fprintf(stderr, "NCCL teardown: %s: %s\n", what, ncclGetErrorString(rc));
}
void report(const char* what, cudaError_t rc) {
  if (rc != cudaSuccess)
    std::fprintf(stderr, "NCCL teardown: %s: %s\n", what, cudaGetErrorString(rc));
}

// Point-to-point without deadlock
// -------------------------------
// NCCL has no tags: a send matches the receive posted in the same position on the same
// communicator, and a NCCL operation occupies its stream until the peer's side runs. With one
// stream per rank, 1F1B deadlocks at once (pp 2, m 2): stage 0 queues send F0, send F1, recv B0;
// stage 1 queues recv F0, send B0, recv F1; send F1 waits for recv F1, which sits behind send B0,
// which waits for recv B0, which sits behind send F1. One communicator per neighbour pair has the
// same cycle.
//
// Here every message between stages s and s+1 travels on lane 2 * (s % 2) + (0 up | 1 down), a
// two-rank communicator with a stream of its own on both ends. Then:
//  1. Every lane of a rank carries one neighbour's messages in one direction, and both ends of
//     a lane hold the same sequence: the executor posts forward messages in microbatch order and
//     backward messages in microbatch order (both schedules run each kind in microbatch order),
//     and a microbatch's tensors in the stage's fixed order. So the k-th send on a lane meets the
//     k-th receive at the other end, and an operation queued on a lane waits only behind earlier
//     messages of the same sequence, which the peer also posted earlier.
//  2. The only cross-stream waits are the executor's own data dependencies: a send starts when
//     the compute stream has produced the tensor (event recorded in isend); a receive starts when
//     the compute stream is done with what the buffer held before (event recorded in irecv); the
//     compute stream reads a received tensor, or reuses a sent one, only after wait() (it waits for
//     an event recorded after the NCCL call). No call blocks the host, and the lanes are connected
//     at construction, so no first-use handshake blocks one either.
// Hence the GPU's dependency graph is the executor's data-dependency graph with non-blocking
// sends, the graph that makes the MPI executor deadlock-free, and it is acyclic for every schedule
// whose lists respect the data dependencies: 1F1B, GPipe, forward-only. test_nccl_comm.cpp checks
// this by running the real executor against a stream-level model of these lanes (pp 2..8, m 1..12,
// both schedules) and by showing that one stream per rank, or per neighbour pair, deadlocks.
//
// Limit: a send completes only when the peer receives. A device-wide synchronization mid-step
// (cudaDeviceSynchronize, cudaFree) waits for this rank's sends too, and two neighbours doing that
// between their sends and their next receives wait on each other (1F1B: stage s after send
// F(j + warmup), stage s+1 after send B(j)). Synchronizing the backend's stream is safe: it waits
// for no more than the MPI executor's blocking waits would.

class NcclComm final : public Comm {
 public:
  NcclComm(std::unique_ptr<MpiComm> mpi, CudaBackend& be, const NcclCommOptions& options);
  ~NcclComm() override;
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  int size() const override { return mpi_->size(); }
  int rank() const override { return mpi_->rank(); }

  void all_reduce_sum(const Tensor& x) override;
  void all_gather(const Tensor& in, const Tensor& out) override;
  void reduce_scatter_sum(const Tensor& in, const Tensor& out) override;
  void broadcast(const Tensor& x, int root) override;
  void barrier() override { mpi_->barrier(); }
  double all_reduce_max(double v) override { return mpi_->all_reduce_max(v); }
  void all_reduce_sum(double* v, int n) override { mpi_->all_reduce_sum(v, n); }
  Request isend(const Tensor& x, int peer, int tag) override;
  Request irecv(const Tensor& x, int peer, int tag) override;
  void wait(Request& r) override;
  bool sends_to_any_rank() const override { return false; }  // device tensors: pipeline neighbours only

 private:
  // One direction between this rank and one neighbour: a two-rank communicator and its stream.
  struct Lane {
    ncclComm_t comm = nullptr;
    cudaStream_t stream = nullptr;
    int peer = 0;        // the neighbour's rank inside `comm` (0 or 1)
    bool sends = false;  // this rank's side of the lane sends (else it receives)
  };
  struct Pending {
    Request host;                  // a host message, handled by the MpiComm
    cudaEvent_t done = nullptr;    // a device message: recorded on its lane after the NCCL call
  };

  void init_nccl();
  void build_lanes();
  void connect_lanes();
  void teardown(bool abort);
  // True for device tensors (NCCL), false for host ones (MPI); throws on a mix.
  bool on_device(const Tensor& a, const Tensor& b, const char* what) const;
  // Runs a call on the MpiComm, adding what it counted to this comm's stats.
  template <typename F>
  auto counted(F&& f);
  Request post(const Tensor& x, int peer, bool send);
  cudaEvent_t event();
  void copy_local(const Tensor& in, const Tensor& out);

  std::unique_ptr<MpiComm> mpi_;  // first member: destroyed after the NCCL communicators
  cudaStream_t stream_;           // the backend's compute stream
  int device_;
  bool local_;                    // one rank and no NCCL communicator: collectives copy locally
  ncclComm_t comm_ = nullptr;
  std::array<Lane, kP2pLanes> lanes_{};
  bool lanes_built_ = false;
  std::vector<cudaEvent_t> free_events_;
  std::int64_t next_request_ = 0;
  std::unordered_map<std::int64_t, Pending> pending_;
};

NcclComm::NcclComm(std::unique_ptr<MpiComm> mpi, CudaBackend& be, const NcclCommOptions& options)
    : mpi_(std::move(mpi)), stream_(be.stream()), device_(be.device_index()) {
  DIT_CHECK(mpi_, "make_nccl_comm needs an MPI communicator");
  local_ = size() == 1 && !options.nccl_for_one_rank;
  if (local_) return;
  try {
    DIT_CUDA_CHECK(cudaSetDevice(device_));  // NCCL binds a communicator to the current device
    init_nccl();
    if (options.point_to_point && size() > 1) {
      build_lanes();
      connect_lanes();
    }
  } catch (...) {
    teardown(/*abort=*/true);  // the destructor does not run for a throwing constructor
    throw;
  }
}

NcclComm::~NcclComm() {
  // While an exception unwinds, peers may never reach their own teardown: abort locally
  // (ncclCommDestroy would wait for them) and let main() take every rank down.
  teardown(/*abort=*/std::uncaught_exceptions() > 0);
}

// Rank 0 makes the id (or fails) and every rank learns both, so all throw together on failure.
void NcclComm::init_nccl() {
  struct {
    ncclUniqueId id;
    int rc;
  } msg{};
  if (rank() == 0) msg.rc = static_cast<int>(ncclGetUniqueId(&msg.id));
  DIT_MPI_CHECK(MPI_Bcast(&msg, static_cast<int>(sizeof msg), MPI_BYTE, 0, mpi_->handle()));
  DIT_CHECK(msg.rc == ncclSuccess, "ncclGetUniqueId failed on rank 0: ",
            ncclGetErrorString(static_cast<ncclResult_t>(msg.rc)));
  DIT_NCCL_CHECK(ncclCommInitRank(&comm_, size(), msg.id, rank()));
}

// Four splits of the communicator, in the same order on every rank (ncclCommSplit is collective):
// lane 2p + d pairs ranks (s, s+1) with s % 2 == p; d = 0 carries s -> s+1, d = 1 carries s+1 -> s.
// A rank is the lower end of link `rank` (parity rank % 2) and the upper end of link rank - 1
// (the other parity), so it belongs to at most one pair per parity.
void NcclComm::build_lanes() {
  const int me = rank(), n = size();
  for (int parity = 0; parity < 2; ++parity) {
    if (parity == 1 && n < 3) break;  // no link 1: every rank would pass NOCOLOR
    const int link = me % 2 == parity ? me : me - 1;
    const bool member = link >= 0 && link + 1 < n;
    for (int dir = 0; dir < 2; ++dir) {
      Lane& l = lanes_[2 * parity + dir];
      const int color = member ? link : NCCL_SPLIT_NOCOLOR;
      DIT_NCCL_CHECK(ncclCommSplit(comm_, color, me, &l.comm, nullptr));
      if (!member) continue;
      const bool lower = me == link;
      l.peer = lower ? 1 : 0;
      l.sends = (dir == 0) == lower;
      DIT_CUDA_CHECK(cudaStreamCreateWithFlags(&l.stream, cudaStreamNonBlocking));
    }
  }
  lanes_built_ = true;
}

// NCCL connects point-to-point peers at their first message, a handshake that blocks the host
// until the peer's host gets there too; one tiny message per lane, all ranks together in one
// group, does it now. (NCCL connects all of a peer's channels at once, whatever the size.)
void NcclComm::connect_lanes() {
  std::int32_t* words = nullptr;  // one word per lane; its contents do not matter
  DIT_CUDA_CHECK(cudaMalloc(&words, kP2pLanes * sizeof(std::int32_t)));
  try {
    DIT_NCCL_CHECK(ncclGroupStart());
    for (int i = 0; i < kP2pLanes; ++i) {
      const Lane& l = lanes_[i];
      if (!l.comm) continue;
      if (l.sends)
        DIT_NCCL_CHECK(ncclSend(words + i, 1, ncclInt32, l.peer, l.comm, l.stream));
      else
        DIT_NCCL_CHECK(ncclRecv(words + i, 1, ncclInt32, l.peer, l.comm, l.stream));
    }
    DIT_NCCL_CHECK(ncclGroupEnd());
    for (const Lane& l : lanes_)
      if (l.stream) DIT_CUDA_CHECK(cudaStreamSynchronize(l.stream));
  } catch (...) {
    cudaFree(words);
    throw;
  }
  DIT_CUDA_CHECK(cudaFree(words));
}

void NcclComm::teardown(bool abort) {
  auto finish = [abort](ncclComm_t& c) {
    if (!c) return;
    ncclResult_t state = ncclSuccess;
    const bool broken = ncclCommGetAsyncError(c, &state) != ncclSuccess || state != ncclSuccess;
    report(abort || broken ? "ncclCommAbort" : "ncclCommDestroy",
           abort || broken ? ncclCommAbort(c) : ncclCommDestroy(c));
    c = nullptr;
  };
  for (Lane& l : lanes_) {
    finish(l.comm);
    if (l.stream) report("cudaStreamDestroy", cudaStreamDestroy(l.stream));
    l.stream = nullptr;
  }
  finish(comm_);
  for (auto& [id, p] : pending_)
    if (p.done) report("cudaEventDestroy", cudaEventDestroy(p.done));
  pending_.clear();
  for (cudaEvent_t e : free_events_) report("cudaEventDestroy", cudaEventDestroy(e));
  free_events_.clear();
}

bool NcclComm::on_device(const Tensor& a, const Tensor& b, const char* what) const {
  DIT_CHECK(a.device == b.device, what, ": one tensor is on the host and one on the GPU");
  return a.device == Device::Cuda;
}

template <typename F>
auto NcclComm::counted(F&& f) {
  const CommStats before = mpi_->stats();
  struct Add {
    CommStats& to;
    const CommStats& from;
    const CommStats before;
    ~Add() {
      to.bytes += from.bytes - before.bytes;
      to.calls += from.calls - before.calls;
      to.seconds += from.seconds - before.seconds;
    }
  } add{stats_, mpi_->stats(), before};
  return f();
}

cudaEvent_t NcclComm::event() {
  if (!free_events_.empty()) {
    cudaEvent_t e = free_events_.back();
    free_events_.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  DIT_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}

void NcclComm::copy_local(const Tensor& in, const Tensor& out) {
  if (in.data == out.data || in.bytes() == 0) return;
  DIT_CHECK(!overlap(in.data, in.bytes(), out.data, out.bytes()),
            "a one-rank collective on overlapping tensors that are not the same");
  DIT_CUDA_CHECK(cudaMemcpyAsync(out.data, in.data, in.bytes(), cudaMemcpyDeviceToDevice, stream_));
}

void NcclComm::all_reduce_sum(const Tensor& x) {
  if (!on_device(x, x, "all_reduce_sum")) return counted([&] { mpi_->all_reduce_sum(x); });
  if (local_ || x.numel() == 0) return;
  CallTimer t(stats_, ring_all_reduce_bytes(x.bytes(), size()));
  DIT_NCCL_CHECK(ncclAllReduce(x.data, x.data, count_of(x), nccl_type(x.dtype), ncclSum, comm_,
                               stream_));
}

void NcclComm::all_gather(const Tensor& in, const Tensor& out) {
  if (!on_device(in, out, "all_gather")) return counted([&] { mpi_->all_gather(in, out); });
  DIT_CHECK(out.numel() == in.numel() * size() && in.dtype == out.dtype, "all_gather: ",
            in.shape.str(), " from each of ", size(), " ranks does not fill ", out.shape.str());
  if (local_) return copy_local(in, out);
  // In place when `in` is this rank's block of `out` (NCCL: sendbuff == recvbuff + rank * count).
  const auto* block = static_cast<const char*>(out.data) + in.bytes() * rank();
  DIT_CHECK(in.data == block || !overlap(in.data, in.bytes(), out.data, out.bytes()),
            "all_gather: the input overlaps the output without being this rank's block of it");
  CallTimer t(stats_, ring_gather_scatter_bytes(out.bytes(), size()));
  if (in.numel() == 0) return;
  DIT_NCCL_CHECK(ncclAllGather(in.data, out.data, count_of(in), nccl_type(in.dtype), comm_,
                               stream_));
}

void NcclComm::reduce_scatter_sum(const Tensor& in, const Tensor& out) {
  if (!on_device(in, out, "reduce_scatter_sum"))
    return counted([&] { mpi_->reduce_scatter_sum(in, out); });
  DIT_CHECK(in.numel() == out.numel() * size() && in.dtype == out.dtype, "reduce_scatter: ",
            in.shape.str(), " does not split into ", size(), " blocks of ", out.shape.str());
  if (local_) return copy_local(in, out);
  // In place when `out` is this rank's block of `in` (NCCL: recvbuff == sendbuff + rank * count).
  const auto* block = static_cast<const char*>(in.data) + out.bytes() * rank();
  DIT_CHECK(out.data == block || !overlap(in.data, in.bytes(), out.data, out.bytes()),
            "reduce_scatter: the output overlaps the input without being this rank's block of it");
  CallTimer t(stats_, ring_gather_scatter_bytes(in.bytes(), size()));
  if (out.numel() == 0) return;
  // The count is per rank: the elements each rank receives.
  DIT_NCCL_CHECK(ncclReduceScatter(in.data, out.data, count_of(out), nccl_type(in.dtype), ncclSum,
                                   comm_, stream_));
}

void NcclComm::broadcast(const Tensor& x, int root) {
  if (!on_device(x, x, "broadcast")) return counted([&] { mpi_->broadcast(x, root); });
  DIT_CHECK(root >= 0 && root < size(), "broadcast from rank ", root, " of ", size());
  if (local_ || x.numel() == 0) return;
  CallTimer t(stats_, rank() == root ? x.bytes() : 0);
  DIT_NCCL_CHECK(ncclBroadcast(x.data, x.data, count_of(x), nccl_type(x.dtype), root, comm_,
                               stream_));
}

Request NcclComm::isend(const Tensor& x, int peer, int tag) {
  if (x.device == Device::Host) {
    const Request r = counted([&] { return mpi_->isend(x, peer, tag); });
    pending_[next_request_] = Pending{r, nullptr};
    return Request{next_request_++};
  }
  return post(x, peer, /*send=*/true);
}

Request NcclComm::irecv(const Tensor& x, int peer, int tag) {
  if (x.device == Device::Host) {
    const Request r = counted([&] { return mpi_->irecv(x, peer, tag); });
    pending_[next_request_] = Pending{r, nullptr};
    return Request{next_request_++};
  }
  return post(x, peer, /*send=*/false);
}

// The device side of isend/irecv (see "Point-to-point without deadlock" above).
Request NcclComm::post(const Tensor& x, int peer, bool send) {
  DIT_CHECK(peer >= 0 && peer < size() && peer != rank(), "point-to-point ",
            send ? "send to" : "receive from", " rank ", peer, " on rank ", rank(), " of ",
            size());
  DIT_CHECK(lanes_built_, "point-to-point on a NCCL communicator made without point_to_point");
  Lane& l = lanes_[send ? p2p_lane(rank(), peer) : p2p_lane(peer, rank())];
  DIT_CHECK(l.comm && l.sends == send, "NCCL point-to-point lane missing for rank ", rank(),
            " and rank ", peer);
  CallTimer t(stats_, send ? x.bytes() : 0);
  // The lane starts once the compute stream has written the tensor (send) or finished with the
  // buffer's previous contents (receive).
  cudaEvent_t ready = event();
  DIT_CUDA_CHECK(cudaEventRecord(ready, stream_));
  DIT_CUDA_CHECK(cudaStreamWaitEvent(l.stream, ready, 0));
  free_events_.push_back(ready);  // the wait holds on to the recorded state; reusable now
  if (x.numel() > 0) {
    if (send)
      DIT_NCCL_CHECK(ncclSend(x.data, count_of(x), nccl_type(x.dtype), l.peer, l.comm, l.stream));
    else
      DIT_NCCL_CHECK(ncclRecv(x.data, count_of(x), nccl_type(x.dtype), l.peer, l.comm, l.stream));
  }
  cudaEvent_t done = event();
  DIT_CUDA_CHECK(cudaEventRecord(done, l.stream));
  pending_[next_request_] = Pending{Request{}, done};
  return Request{next_request_++};
}

void NcclComm::wait(Request& req) {
  if (!req.pending()) return;
  auto it = pending_.find(req.id);
  DIT_CHECK(it != pending_.end(), "wait on an unknown request ", req.id);
  Pending p = it->second;
  pending_.erase(it);
  req.id = -1;
  if (!p.done) return counted([&] { mpi_->wait(p.host); });
  CallTimer t(stats_, 0);
  --stats_.calls;
  // The compute stream, not the host, waits: later kernels see the received data, and may reuse
  // a sent buffer.
  free_events_.push_back(p.done);
  DIT_CUDA_CHECK(cudaStreamWaitEvent(stream_, p.done, 0));
}

}  // namespace

std::unique_ptr<Comm> make_nccl_comm(std::unique_ptr<MpiComm> mpi, CudaBackend& be,
                                     const NcclCommOptions& options) {
  return std::make_unique<NcclComm>(std::move(mpi), be, options);
}

}  // namespace dit

#endif  // DIT_HAVE_CUDA
