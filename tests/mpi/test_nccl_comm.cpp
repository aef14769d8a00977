// The NCCL Comm and rank -> GPU placement. Everywhere: placement agrees over the world, and a
// stream-level model of the NCCL point-to-point lanes, driven by the real pipeline executor, shows
// 1F1B and GPipe cannot deadlock (and that fewer streams do). With a GPU per rank: every
// collective on fp32/bf16/fp16/int32 device tensors matches MPI on host fp32 copies (integer data,
// exact), and a pipeline run over NCCL delivers every microbatch's tensors. With a GPU but ranks
// sharing it: one-rank NCCL communicators still run every collective call. Otherwise: skipped.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "parallel/device_placement.h"
#include "parallel/mpi_comm.h"
#include "parallel/nccl_comm.h"
#include "parallel/pipeline.h"

#ifdef DIT_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

namespace dit {

namespace {

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
// The same on every rank (for checks that must agree).
bool agreed(int v) {
  int lo = 0, hi = 0;
  MPI_Allreduce(&v, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&v, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return lo == hi;
}

// place_rank_on_gpu is collective: every rank reaches the first call in the same test.
const DevicePlacement& placement() {
  static const DevicePlacement p = place_rank_on_gpu();
  return p;
}

}  // namespace

TEST(NcclPlacement, AgreesOverTheWorld) {
  const DevicePlacement& p = placement();
  EXPECT_GE(p.local_rank, 0);
  EXPECT_LT(p.local_rank, p.local_size);
  EXPECT_EQ(p.device, p.devices > 0 ? p.local_rank % p.devices : -1);
  EXPECT_LE(p.min_devices, p.devices);
  EXPECT_TRUE(agreed(p.shared ? 1 : 0));
  EXPECT_TRUE(agreed(p.min_devices));
  std::string why;
  EXPECT_TRUE(agreed(nccl_usable(p, &why) ? 1 : 0)) << why;

  DevicePlacement forced = p;
  forced.comm_mode = CommMode::Mpi;
  EXPECT_FALSE(nccl_usable(forced, &why));
  EXPECT_FALSE(why.empty());
}

// DIT_COMM is agreed over the job: the same value everywhere is taken, a bad value on one rank or
// values that differ between ranks throw on every rank (no rank goes on alone).
TEST(NcclPlacement, CommModeIsAgreedOrRefusedEverywhere) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const char* old = std::getenv("DIT_COMM");
  const std::string saved = old ? old : "";
  setenv("DIT_COMM", "mpi", 1);
  EXPECT_EQ(agree_comm_mode(), CommMode::Mpi);
  setenv("DIT_COMM", rank == size - 1 ? "fast" : "mpi", 1);
  EXPECT_THROW(agree_comm_mode(), Error);
  if (size > 1) {
    setenv("DIT_COMM", rank == 0 ? "nccl" : "auto", 1);
    EXPECT_THROW(agree_comm_mode(), Error);
  }
  unsetenv("DIT_COMM");
  EXPECT_EQ(agree_comm_mode(), CommMode::Auto);
  if (old) setenv("DIT_COMM", saved.c_str(), 1);
}

// ---- A stream-level model of the point-to-point lanes --------------------------------------
// Each rank has stream 0 (compute) and one stream per lane. The executor runs against a
// RecordingComm that queues, as nccl_comm.cpp does: for a message, "wait for the compute stream
// to reach here" and then the NCCL call on the message's stream; for wait(), a compute-stream wait
// for that message. A NCCL send and receive complete together, once both are at the head of their
// streams (the worst case: real NCCL may let small sends finish early). The model deadlocks when
// no stream can move and some still hold work.
namespace {

using MessageKey = std::tuple<int, int, int, int>;  // from, to, stream, k-th on that stream pair
using StreamOf = int (*)(int from, int to);         // stream index of a message (0: compute)

struct Item {
  enum class Kind { Compute, After, Message, Wait } kind;
  std::size_t after = 0;  // After: the compute-stream position its stream waits for
  MessageKey key{};       // Message, Wait
  bool send = false;      // Message: this end sends
  int tag = 0;
  std::int64_t numel = 0;
};

struct RankTrace {
  std::vector<std::vector<Item>> streams = std::vector<std::vector<Item>>(1 + kP2pLanes);
  std::map<std::int64_t, MessageKey> requests;
  std::map<std::tuple<int, int, int>, int> posted;  // (from, to, stream) -> messages so far
  void compute() { streams[0].push_back({Item::Kind::Compute}); }
};

class RecordingComm final : public Comm {
 public:
  RecordingComm(int rank, int size, StreamOf stream_of, RankTrace& trace)
      : rank_(rank), size_(size), stream_of_(stream_of), t_(trace) {}
  int size() const override { return size_; }
  int rank() const override { return rank_; }
  void all_reduce_sum(const Tensor&) override { DIT_FAIL("not modelled"); }
  void all_gather(const Tensor&, const Tensor&) override { DIT_FAIL("not modelled"); }
  void reduce_scatter_sum(const Tensor&, const Tensor&) override { DIT_FAIL("not modelled"); }
  void broadcast(const Tensor&, int) override { DIT_FAIL("not modelled"); }
  void barrier() override { DIT_FAIL("not modelled"); }
  double all_reduce_max(double) override { DIT_FAIL("not modelled"); }
  void all_reduce_sum(double*, int) override { DIT_FAIL("not modelled"); }
  Request isend(const Tensor& x, int peer, int tag) override { return post(x, rank_, peer, tag); }
  Request irecv(const Tensor& x, int peer, int tag) override { return post(x, peer, rank_, tag); }
  void wait(Request& r) override {
    if (!r.pending()) return;
    Item w{Item::Kind::Wait};
    w.key = t_.requests.at(r.id);
    t_.streams[0].push_back(w);
    r.id = -1;
  }

 private:
  Request post(const Tensor& x, int from, int to, int tag) {
    const int s = stream_of_(from, to);
    const int k = t_.posted[{from, to, s}]++;
    if (s != 0) t_.streams[s].push_back({Item::Kind::After, t_.streams[0].size()});
    Item m{Item::Kind::Message};
    m.key = {from, to, s, k};
    m.send = from == rank_;
    m.tag = tag;
    m.numel = x.numel();
    t_.streams[s].push_back(m);
    t_.requests[next_] = m.key;
    return Request{next_++};
  }
  int rank_, size_;
  StreamOf stream_of_;
  RankTrace& t_;
  std::int64_t next_ = 0;
};

class HostAllocator final : public Allocator {
 public:
  void* allocate(std::size_t bytes) override { return std::malloc(bytes); }
  void deallocate(void* p) override { std::free(p); }
  Device device() const override { return Device::Host; }
};

// Sends two tensors of different sizes per microbatch and direction, like x and c of a DiT stage.
class TraceStage final : public PipelineStage {
 public:
  TraceStage(int stage, int stages, RankTrace& t) : s_(stage), last_(stages - 1), t_(t) {}
  std::vector<Tensor> forward_inputs(int, int, Arena& a) override { return s_ > 0 ? two(a) : none(); }
  std::vector<Tensor> forward(int, int, const std::vector<Tensor>&, Arena& a) override {
    t_.compute();
    return s_ < last_ ? two(a) : none();
  }
  std::vector<Tensor> backward_inputs(int, int, Arena& a) override {
    return s_ < last_ ? two(a) : none();
  }
  std::vector<Tensor> backward(int, int, const std::vector<Tensor>&, Arena& a) override {
    t_.compute();
    return s_ > 0 ? two(a) : none();
  }

 private:
  static std::vector<Tensor> none() { return {}; }
  static std::vector<Tensor> two(Arena& a) {
    return {a.tensor({6}, DType::F32), a.tensor({2}, DType::F32)};
  }
  int s_, last_;
  RankTrace& t_;
};

// Runs the executor of every stage against the model; true when every stream drains.
bool model_completes(const std::vector<std::vector<Action>>& lists, int m, StreamOf stream_of) {
  const int pp = static_cast<int>(lists.size());
  std::vector<RankTrace> traces(pp);
  HostAllocator alloc;
  for (int r = 0; r < pp; ++r) {
    RecordingComm comm(r, pp, stream_of, traces[r]);
    TraceStage stage(r, pp, traces[r]);
    PipelineExecutor(comm, alloc).run(lists[r], m, stage);
  }
  // Both ends of every message: where they sit, and that they agree (the tag and size NCCL
  // cannot check).
  struct End {
    int rank, stream;
    std::size_t index;
  };
  std::map<MessageKey, std::vector<End>> ends;
  for (int r = 0; r < pp; ++r)
    for (int s = 0; s <= kP2pLanes; ++s)
      for (std::size_t i = 0; i < traces[r].streams[s].size(); ++i)
        if (traces[r].streams[s][i].kind == Item::Kind::Message)
          ends[traces[r].streams[s][i].key].push_back({r, s, i});
  for (const auto& [key, e] : ends) {
    EXPECT_EQ(e.size(), 2u) << "a message without its other end";
    if (e.size() != 2) return false;
    const Item& a = traces[e[0].rank].streams[e[0].stream][e[0].index];
    const Item& b = traces[e[1].rank].streams[e[1].stream][e[1].index];
    EXPECT_NE(a.send, b.send);
    EXPECT_EQ(a.tag, b.tag) << "a send meets a receive of another message";
    EXPECT_EQ(a.numel, b.numel);
  }
  std::vector<std::vector<std::size_t>> pos(pp, std::vector<std::size_t>(1 + kP2pLanes, 0));
  std::map<MessageKey, bool> done;
  for (bool moved = true; moved;) {
    moved = false;
    for (int r = 0; r < pp; ++r)
      for (int s = 0; s <= kP2pLanes; ++s)
        for (std::size_t& at = pos[r][s]; at < traces[r].streams[s].size(); ++at, moved = true) {
          const Item& it = traces[r].streams[s][at];
          if (it.kind == Item::Kind::After && pos[r][0] < it.after) break;
          if (it.kind == Item::Kind::Wait && !done[it.key]) break;
          if (it.kind == Item::Kind::Message && !done[it.key]) {
            const std::vector<End>& e = ends[it.key];
            const End& other = e[0].rank == r && e[0].stream == s ? e[1] : e[0];
            if (pos[other.rank][other.stream] != other.index) break;  // not at its head yet
            done[it.key] = true;
          }
        }
  }
  for (int r = 0; r < pp; ++r)
    for (int s = 0; s <= kP2pLanes; ++s)
      if (pos[r][s] < traces[r].streams[s].size()) return false;
  return true;
}

int lanes(int from, int to) { return 1 + p2p_lane(from, to); }
int one_stream(int, int) { return 0; }
int one_lane_per_pair(int from, int to) { return 1 + 2 * (std::min(from, to) % 2); }

std::vector<std::vector<Action>> lists_of(ScheduleKind kind, int pp, int m) {
  std::vector<std::vector<Action>> l;
  for (int s = 0; s < pp; ++s) l.push_back(make_pipeline_schedule(kind, pp, s, m));
  return l;
}

}  // namespace

TEST(NcclP2pModel, LanesNeverDeadlock) {
  for (ScheduleKind kind : {ScheduleKind::OneFOneB, ScheduleKind::GPipe})
    for (int pp = 2; pp <= 8; ++pp)
      for (int m = 1; m <= 12; ++m)
        EXPECT_TRUE(model_completes(lists_of(kind, pp, m), m, lanes))
            << schedule_name(kind) << " pp " << pp << " m " << m;
  for (int pp = 2; pp <= 8; ++pp) {
    std::vector<std::vector<Action>> fwd(pp, make_forward_only(5));
    EXPECT_TRUE(model_completes(fwd, 5, lanes)) << "forward only, pp " << pp;
  }
}

// The model has teeth: one stream per rank, or one per neighbour pair for both directions,
// deadlocks 1F1B at pp 3, m 2 and GPipe at pp 2, m 2 (see nccl_comm.cpp). (Since the executor posts
// a gradient's receive right after its forward, 1F1B at pp 2 gets through on fewer lanes.)
TEST(NcclP2pModel, FewerLanesDeadlock) {
  EXPECT_FALSE(model_completes(lists_of(ScheduleKind::OneFOneB, 3, 2), 2, one_stream));
  EXPECT_FALSE(model_completes(lists_of(ScheduleKind::OneFOneB, 3, 2), 2, one_lane_per_pair));
  EXPECT_FALSE(model_completes(lists_of(ScheduleKind::GPipe, 2, 2), 2, one_stream));
  EXPECT_FALSE(model_completes(lists_of(ScheduleKind::OneFOneB, 4, 6), 6, one_lane_per_pair));
  EXPECT_TRUE(model_completes(lists_of(ScheduleKind::GPipe, 2, 1), 1, one_stream));
}

TEST(NcclP2pModel, LaneArithmetic) {
  EXPECT_EQ(p2p_lane(0, 1), 0);
  EXPECT_EQ(p2p_lane(1, 0), 1);
  EXPECT_EQ(p2p_lane(1, 2), 2);
  EXPECT_EQ(p2p_lane(2, 1), 3);
  EXPECT_EQ(p2p_lane(4, 5), 0);
  // A middle stage's four messages use four different lanes.
  EXPECT_NE(p2p_lane(2, 3), p2p_lane(1, 2));
  EXPECT_NE(p2p_lane(3, 2), p2p_lane(2, 1));
  EXPECT_THROW(p2p_lane(0, 2), Error);
}

#ifdef DIT_HAVE_CUDA

namespace {

int world_size() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

// value(rank, i): small integers, so sums over 8 ranks are exact in bf16 and fp16.
float value(int rank, std::int64_t i) { return static_cast<float>((rank * 7 + i * 3) % 17 - 8); }

// A device tensor of `dt`; upload/download move host fp32 values in and out of any tensor
// (int32 through an int32 host copy: the backend converts between float types only).
struct DeviceTensor {
  Buffer buf;
  Tensor t;
  DeviceTensor(Backend& be, std::int64_t n, DType dt)
      : buf(be, static_cast<std::size_t>(n) * dtype_size(dt)), t(buf.tensor({n}, dt)) {}
};
Tensor host(std::vector<float>& v) {
  return Tensor{v.data(), DType::F32, {static_cast<std::int64_t>(v.size())}, Device::Host};
}
void upload(Backend& be, const Tensor& dst, std::vector<float> v) {
  if (dst.dtype != DType::I32) return be.copy(dst, host(v));
  std::vector<std::int32_t> w(v.begin(), v.end());
  be.copy(dst, Tensor{w.data(), DType::I32, {dst.numel()}, Device::Host});
}
std::vector<float> download(Backend& be, const Tensor& src) {
  std::vector<float> v(static_cast<std::size_t>(src.numel()));
  if (src.dtype != DType::I32) {
    be.copy(host(v), src);
    return v;
  }
  std::vector<std::int32_t> w(v.size());
  be.copy(Tensor{w.data(), DType::I32, {src.numel()}, Device::Host}, src);
  return std::vector<float>(w.begin(), w.end());
}
// Equal element for element (one line on failure, not a megabyte of values).
void expect_same(const std::vector<float>& got, const std::vector<float>& want,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  std::size_t bad = 0, first = 0;
  for (std::size_t i = got.size(); i-- > 0;)
    if (got[i] != want[i]) ++bad, first = i;
  EXPECT_EQ(bad, 0u) << what << ": first at " << first << ": " << (bad ? got[first] : 0)
                     << " instead of " << (bad ? want[first] : 0);
  bool nonzero = false;
  for (float x : want) nonzero |= x != 0;
  EXPECT_TRUE(nonzero) << what << ": an all-zero answer proves nothing";
}

// Every collective of `nccl` on device tensors of `dt` against `mpi` (the same ranks) on host fp32.
void check_collectives(Comm& nccl, Comm& mpi, Backend& be, DType dt) {
  const int n = nccl.size(), me = nccl.rank();
  const std::int64_t k = 1000 + 3;  // elements per rank's block
  const std::string what = std::string(dtype_name(dt)) + " on " + std::to_string(n) + " rank(s)";
  std::vector<float> mine(k), all(k * n);
  for (std::int64_t i = 0; i < k; ++i) mine[i] = value(me, i);
  for (std::int64_t i = 0; i < k * n; ++i) all[i] = value(me, i + 5);

  {  // all_reduce_sum
    DeviceTensor x(be, k, dt);
    upload(be, x.t, mine);
    nccl.stats().reset();
    nccl.all_reduce_sum(x.t);
    if (n > 1) {
      EXPECT_EQ(nccl.stats().bytes, ring_all_reduce_bytes(x.t.bytes(), n)) << what;
    }
    std::vector<float> want = mine;
    mpi.all_reduce_sum(host(want));
    expect_same(download(be, x.t), want, "all_reduce_sum " + what);
  }
  {  // all_gather, then in place
    DeviceTensor in(be, k, dt), out(be, k * n, dt);
    upload(be, in.t, mine);
    nccl.all_gather(in.t, out.t);
    std::vector<float> want(k * n);
    mpi.all_gather(host(mine), host(want));
    expect_same(download(be, out.t), want, "all_gather " + what);
    be.fill(out.t, 99.0f);
    const Tensor block = out.t.view({n, k}).rows(me, 1);
    upload(be, block, mine);
    nccl.all_gather(block, out.t);
    expect_same(download(be, out.t), want, "all_gather in place " + what);
  }
  {  // reduce_scatter_sum, then in place (the output is this rank's block of the input)
    DeviceTensor in(be, k * n, dt), out(be, k, dt);
    upload(be, in.t, all);
    nccl.reduce_scatter_sum(in.t, out.t);
    std::vector<float> want(k);
    mpi.reduce_scatter_sum(host(all), host(want));
    expect_same(download(be, out.t), want, "reduce_scatter_sum " + what);
    upload(be, in.t, all);
    const Tensor block = in.t.view({n, k}).rows(me, 1);
    nccl.reduce_scatter_sum(in.t, block);
    expect_same(download(be, block), want, "reduce_scatter_sum in place " + what);
  }
  {  // broadcast from the last rank
    DeviceTensor x(be, k, dt);
    upload(be, x.t, mine);
    nccl.broadcast(x.t, n - 1);
    std::vector<float> want = mine;
    mpi.broadcast(host(want), n - 1);
    expect_same(download(be, x.t), want, "broadcast " + what);
  }
}

// A pipeline stage whose math is exact in bf16: forward adds (stage + 1) to x and c, backward adds
// (stage + 1) to dx and dc; the first stage starts x, c at mb + 1, 64 + mb, the last starts dx, dc
// at 20 + mb, 40 + 2 mb. The last stage keeps what it received forward, the first what it
// received backward.
class AddStage final : public PipelineStage {
 public:
  static constexpr std::int64_t kC = 4096;
  AddStage(Backend& be, int stage, int stages, std::int64_t n, DType dt, int m)
      : be_(be), s_(stage), last_(stages - 1), n_(n), dt_(dt) {
    for (int i = 0; i < m; ++i) kept_.emplace_back(be, static_cast<std::size_t>(n * 4 + kC * 4));
  }
  std::vector<Tensor> forward_inputs(int, int, Arena& a) override { return s_ > 0 ? pair(a) : none(); }
  std::vector<Tensor> forward(int mb, int, const std::vector<Tensor>& in, Arena& a) override {
    if (s_ == last_) return keep(mb, in);
    std::vector<Tensor> out = pair(a);
    step(out, s_ == 0 ? std::vector<Tensor>{} : in, s_ == 0 ? mb + 1.0f : s_ + 1.0f,
         s_ == 0 ? 64.0f + mb : s_ + 1.0f);
    return out;
  }
  std::vector<Tensor> backward_inputs(int, int, Arena& a) override {
    return s_ < last_ ? pair(a) : none();
  }
  std::vector<Tensor> backward(int mb, int, const std::vector<Tensor>& in, Arena& a) override {
    if (s_ == 0) return keep(mb, in);
    std::vector<Tensor> out = pair(a);
    step(out, s_ == last_ ? std::vector<Tensor>{} : in, s_ == last_ ? 20.0f + mb : s_ + 1.0f,
         s_ == last_ ? 40.0f + 2 * mb : s_ + 1.0f);
    return out;
  }
  // What this stage kept of microbatch mb: x (or dx) and c (or dc).
  std::pair<Tensor, Tensor> kept(int mb) const {
    return {kept_[mb].tensor({n_}, dt_), kept_[mb].tensor({kC}, DType::F32, n_ * 4)};
  }

 private:
  static std::vector<Tensor> none() { return {}; }
  std::vector<Tensor> pair(Arena& a) const {
    return {a.tensor({n_}, dt_), a.tensor({kC}, DType::F32)};
  }
  void step(const std::vector<Tensor>& out, const std::vector<Tensor>& in, float ax, float ac) {
    be_.fill(out[0], ax);
    be_.fill(out[1], ac);
    if (in.empty()) return;
    be_.axpy(1.0f, in[0], out[0]);
    be_.axpy(1.0f, in[1], out[1]);
  }
  std::vector<Tensor> keep(int mb, const std::vector<Tensor>& in) {
    be_.copy(kept(mb).first, in[0]);
    be_.copy(kept(mb).second, in[1]);
    return {};
  }
  Backend& be_;
  int s_, last_;
  std::int64_t n_;
  DType dt_;
  std::vector<Buffer> kept_;
};

// Runs the schedule on pp = all ranks over `comm` and checks what the end stages kept.
void check_pipeline(Comm& comm, Backend& be, DType dt, ScheduleKind kind, int m) {
  const int pp = comm.size(), s = comm.rank();
  const std::int64_t n = 1 << 20;  // 2 MiB of bf16: past NCCL's eager buffers
  AddStage stage(be, s, pp, n, dt, m);
  PipelineExecutor(comm, be).run(make_pipeline_schedule(kind, pp, s, m), m, stage);
  be.synchronize();
  if (s != 0 && s != pp - 1) return;
  float middle = 0;  // what the middle stages add on the way
  for (int j = 1; j < pp - 1; ++j) middle += j + 1.0f;
  for (int mb = 0; mb < m; ++mb) {
    const auto [x, c] = stage.kept(mb);
    const float wx = s == pp - 1 ? mb + 1.0f + middle : 20.0f + mb + middle;
    const float wc = s == pp - 1 ? 64.0f + mb + middle : 40.0f + 2 * mb + middle;
    const std::string what = schedule_name(kind) + " m " + std::to_string(m) + " microbatch " +
                             std::to_string(mb) + (s == 0 ? " backward" : " forward");
    expect_same(download(be, x), std::vector<float>(n, wx), what + " x");
    expect_same(download(be, c), std::vector<float>(AddStage::kC, wc), what + " c");
  }
}

}  // namespace

// One-rank communicators on every rank's GPU, which works even where ranks share a GPU: the
// local copies, then a real one-rank NCCL communicator through every collective call.
TEST(NcclComm, OneRankCollectives) {
  const DevicePlacement& p = placement();
  if (p.min_devices == 0) GTEST_SKIP() << "one-rank NCCL not run: some rank has no usable GPU";
  CudaBackend be(DType::F32);
  auto world = MpiComm::world();
  for (bool nccl : {false, true}) {
    NcclCommOptions o;
    o.nccl_for_one_rank = nccl;
    auto comm = make_nccl_comm(MpiComm::split(*world, world_rank(), 0), be, o);
    auto ref = MpiComm::split(*world, world_rank(), 0);
    for (DType dt : {DType::F32, DType::BF16, DType::F16, DType::I32})
      check_collectives(*comm, *ref, be, dt);
    DeviceTensor x(be, 8, DType::F32);
    EXPECT_THROW(comm->isend(x.t, 1, 0), Error);
  }
}

TEST(NcclComm, CollectivesMatchMpi) {
  std::string why;
  if (!nccl_usable(placement(), &why)) GTEST_SKIP() << "NCCL not run: " << why;
  if (world_size() < 2) GTEST_SKIP() << "NCCL collectives need 2 or more ranks";
  CudaBackend be(DType::F32);
  auto world = MpiComm::world();
  NcclCommOptions no_p2p;
  no_p2p.point_to_point = false;
  {
    auto comm = make_nccl_comm(MpiComm::world(), be, no_p2p);
    for (DType dt : {DType::F32, DType::BF16, DType::F16, DType::I32})
      check_collectives(*comm, *world, be, dt);
    // Host tensors go to MPI and are counted here too.
    std::vector<float> v(16, 1.0f);
    comm->stats().reset();
    comm->all_reduce_sum(host(v));
    EXPECT_EQ(v[0], world_size());
    EXPECT_EQ(comm->stats().bytes, ring_all_reduce_bytes(16 * sizeof(float), comm->size()));
  }
  // Halves of the world (one rank each on 2 ranks: the local path).
  const int color = world_rank() % 2;
  auto comm = make_nccl_comm(MpiComm::split(*world, color, world_rank()), be, no_p2p);
  auto ref = MpiComm::split(*world, color, world_rank());
  for (DType dt : {DType::F32, DType::BF16}) check_collectives(*comm, *ref, be, dt);
}

TEST(NcclComm, PipelineOverLanes) {
  std::string why;
  if (!nccl_usable(placement(), &why)) GTEST_SKIP() << "NCCL not run: " << why;
  if (world_size() < 2) GTEST_SKIP() << "a pipeline needs 2 or more ranks";
  CudaBackend be(DType::BF16);
  auto comm = make_nccl_comm(MpiComm::world(), be);
  for (ScheduleKind kind : {ScheduleKind::OneFOneB, ScheduleKind::GPipe})
    for (int m : {1, 2, 3, 5}) check_pipeline(*comm, be, DType::BF16, kind, m);
  // The same stage over MPI on the host (fp32) keeps the same values.
  CpuBackend cpu;
  auto mpi = MpiComm::world();
  check_pipeline(*mpi, cpu, DType::F32, ScheduleKind::OneFOneB, 3);
}

#else

TEST(NcclComm, NotBuilt) {
  GTEST_SKIP() << "this build has no CUDA backend (configured with DIT_CUDA=OFF or without nvcc)";
}

#endif  // DIT_HAVE_CUDA

}  // namespace dit
