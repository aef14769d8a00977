// MPI implementation of Comm: collectives on host tensors, counted in CommStats. Collectives use
// the non-blocking MPI calls and every wait polls with the watchdog's deadline (watchdog.h).
#include "parallel/mpi_comm.h"

#include "parallel/grid.h"
#include "core/trace.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
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

// ---- who is a timed-out wait really waiting for? -------------------------------------------------
// A collective that times out does not know which member of its group is late, and a peer that
// is late may itself be waiting on a third rank. So the timed-out rank asks: it sends a query to
// the ranks it waited on, over MPI_COMM_WORLD with tags no other message uses, and every rank that
// is blocked in a polled wait answers with what it waits for and on which world ranks. The chain
// is followed from answer to answer for a fraction of a second; the ranks that never answer are the ones that
// stopped. Waits serve queries only while they poll (every 256 polls, with the deadline check).
namespace {

constexpr int kInquiryTag = 32101;  // MPI guarantees tags up to 32767
constexpr int kAnswerTag = 32102;
constexpr double kInquirySeconds = 0.3;  // a polling rank answers within microseconds

// The wait this rank is blocked in, if any (one thread drives MPI).
struct CurrentWait {
  std::string (*describe)(const void*) = nullptr;
  const void* self = nullptr;
};
CurrentWait g_current;

// Answers every pending query: "r1,r2,...;<what this rank waits for>" ("-;" when not waiting).
void serve_inquiries() {
  static std::deque<std::string> sent;  // Isend buffers stay alive; answers are few and small
  for (;;) {
    int flag = 0;
    MPI_Status st;
    if (MPI_Iprobe(MPI_ANY_SOURCE, kInquiryTag, MPI_COMM_WORLD, &flag, &st) != MPI_SUCCESS || !flag) return;
    int query = 0;
    MPI_Recv(&query, 1, MPI_INT, st.MPI_SOURCE, kInquiryTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    sent.push_back(g_current.describe ? g_current.describe(g_current.self) : "-;");
    if (sent.size() > 64) sent.pop_front();  // long completed: the oldest answers were eager sends
    MPI_Request r;
    MPI_Isend(sent.back().data(), static_cast<int>(sent.back().size()), MPI_CHAR, st.MPI_SOURCE, kAnswerTag,
              MPI_COMM_WORLD, &r);
    MPI_Request_free(&r);
  }
}

std::vector<int> parse_ranks(const std::string& list) {
  std::vector<int> out;
  std::size_t i = 0;
  while (i < list.size()) {
    const std::size_t j = std::min(list.find(',', i), list.size());
    if (j > i && list[i] != '-') out.push_back(std::atoi(list.substr(i, j - i).c_str()));
    i = j + 1;
  }
  return out;
}

// Asks `ranks` (world ranks) and whoever their answers name; returns a clause naming the ranks
// that did not answer and what the others wait for, or "" when nothing could be learnt.
// `lowest` gets the lowest world rank asked (answering: alive, in a polled wait; or silent: stopped,
// still computing, or already reporting), or -1.
std::string inquire(const std::vector<int>& ranks, int& lowest) {
  int me = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  std::set<int> asked;
  std::map<int, std::pair<std::vector<int>, std::string>> answers;
  static const int query = 0;
  auto ask = [&](int r) {
    if (r == me || !asked.insert(r).second) return;
    MPI_Request req;
    MPI_Isend(&query, 1, MPI_INT, r, kInquiryTag, MPI_COMM_WORLD, &req);
    MPI_Request_free(&req);
  };
  for (int r : ranks) ask(r);
  const auto t0 = std::chrono::steady_clock::now();
  while (answers.size() < asked.size() &&
         std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < kInquirySeconds) {
    serve_inquiries();
    int flag = 0;
    MPI_Status st;
    MPI_Iprobe(MPI_ANY_SOURCE, kAnswerTag, MPI_COMM_WORLD, &flag, &st);
    if (!flag) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    int n = 0;
    MPI_Get_count(&st, MPI_CHAR, &n);
    std::string text(static_cast<std::size_t>(n), '\0');
    MPI_Recv(text.data(), n, MPI_CHAR, st.MPI_SOURCE, kAnswerTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    const std::size_t semi = text.find(';');
    auto on = parse_ranks(text.substr(0, semi));
    answers[st.MPI_SOURCE] = {on, semi == std::string::npos ? "" : text.substr(semi + 1)};
    for (int r : on) ask(r);
  }
  std::set<int> silent;
  for (int r : asked)
    if (!answers.count(r)) silent.insert(r);
  lowest = asked.empty() ? -1 : *asked.begin();
  // Who waits on a silent rank directly (the last link of the chain), else a few of the waiters.
  std::string waiting;
  int listed = 0;
  for (const auto& [r, a] : answers) {
    const bool on_silent = std::any_of(a.first.begin(), a.first.end(), [&](int x) { return silent.count(x) > 0; });
    if (a.second.empty() || listed >= 2 || (!silent.empty() && !on_silent)) continue;
    waiting += (listed++ ? "; " : "") + std::string("world rank ") + std::to_string(r) + " waits for " + a.second;
  }
  std::string out, names;
  for (int r : silent) names += (names.empty() ? "" : ", ") + std::to_string(r);
  if (!silent.empty())
    out = std::string(silent.size() == 1 ? "world rank " : "world ranks ") + names +
          (silent.size() == 1 ? " does" : " do") + " not answer (stopped, hung, or cut off)";
  if (!waiting.empty()) out += (out.empty() ? "every rank asked is itself waiting: " : "; ") + waiting;
  return out;
}

// One message per failure: a timed-out rank above a lower rank it asked leaves the report to that
// rank (main prints it and aborts the job), answering inquiries meanwhile - whether the lower rank
// answered (it waits too), or not (it may be reporting already, with the abort on its way, or
// still computing towards its own timeout); if the job is still there after the grace (that rank
// stopped), it reports.
constexpr double kReportGraceSeconds = 5;
void leave_report_to(int lowest) {
  int me = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  if (lowest < 0 || lowest > me) return;
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < kReportGraceSeconds) {
    serve_inquiries();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace

bool mpi_running() {
  int inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  return inited && !finalized;
}

int node_count() {
  // Computed once, by the first call (a blocking collective of every rank, made at start-up):
  // the machines of a job do not change, and a later call outside the watchdog's polled waits
  // (the step log's MFU) could block forever on a stopped rank.
  static int cached = 0;
  if (cached > 0) return cached;
  MPI_Comm local;
  DIT_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local));
  int local_rank = 0, leaders = 0;
  MPI_Comm_rank(local, &local_rank);
  MPI_Comm_free(&local);
  int leader = local_rank == 0 ? 1 : 0;
  DIT_MPI_CHECK(MPI_Allreduce(&leader, &leaders, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
  cached = leaders;
  return leaders;
}

namespace {
// The trace's category of a communicator's collectives: its axis, as a string that outlives it.
const char* trace_kind(const std::string& name) {
  for (const char* k : {"tp", "pp", "dp", "world"})
    if (name == k) return k;
  return "comm";
}
}  // namespace

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
  // A wait is a span of the group's kind on a profiled rank's timeline (a collective, or ZeRO's
  // messages over dp); the pipeline's messages are the executor's to record (parallel/pipeline.cpp).
  std::optional<trace::Span> span;
  if (trace::on() && (what.peer < 0 || std::string_view(trace_kind(name_)) != "pp")) span.emplace(trace_kind(name_), what.op);
  const double limit = watch_->timeout_s > 0 ? watch_->limit_s() : 0;
  if (limit <= 0 && !yield_ && !watch_->stop_signal) {
    DIT_MPI_CHECK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    return;
  }
  int done = 0;
  DIT_MPI_CHECK(MPI_Test(&r, &done, MPI_STATUS_IGNORE));
  if (done) return;
  const auto t0 = std::chrono::steady_clock::now();
  const WaitingOn waiting{this, &what};
  const CurrentWait outer = g_current;
  g_current = {&WaitingOn::answer, &waiting};
  struct Restore {
    CurrentWait previous;
    ~Restore() { g_current = previous; }
  } restore{outer};
  for (unsigned polls = 1;; ++polls) {
    DIT_MPI_CHECK(MPI_Test(&r, &done, MPI_STATUS_IGNORE));
    if (done) return;
    if (yield_) std::this_thread::yield();
    if (polls % 256 == 0) {  // reading the clock on every poll would cost more than the poll
      serve_inquiries();
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

std::string MpiComm::WaitingOn::answer(const void* self) {
  const auto& me = *static_cast<const WaitingOn*>(self);
  const MpiComm& c = *me.comm;
  std::string ranks;
  for (int r : c.waited_on(*me.what)) {
    if (!ranks.empty()) ranks += ',';
    ranks += std::to_string(r);
  }
  return (ranks.empty() ? "-" : ranks) + ";" + c.describe(*me.what);
}

std::vector<int> MpiComm::waited_on(const Wait& w) const {
  if (w.peer >= 0) return {world_ranks_[static_cast<std::size_t>(w.peer)]};
  std::vector<int> out;
  for (int i = 0; i < size_; ++i)
    if (i != rank_) out.push_back(world_ranks_[static_cast<std::size_t>(i)]);
  return out;
}

std::string MpiComm::describe(const Wait& w) const {
  if (w.peer < 0) return std::string("the ") + w.op + " over " + group();
  const int peer = world_ranks_[static_cast<std::size_t>(w.peer)];
  return std::string("the ") + w.op + " (tag " + std::to_string(w.tag) + ") " +
         (std::string(w.op) == "send" ? "to" : "from") + " world rank " + std::to_string(peer) + " over " + group();
}

void MpiComm::timed_out(const Wait& w, double waited) const {
  char secs[64];
  std::snprintf(secs, sizeof secs, "%.1f s (", waited);
  std::string limit = secs + (watch_->timeout_setting.empty() ? std::string("the watchdog's limit") : watch_->timeout_setting);
  std::snprintf(secs, sizeof secs, " = %g", watch_->timeout_s);
  limit += secs;
  if (watch_->stopping()) limit += ", or " + std::to_string(int(CommWatch::kStopGrace)) + " s after a stop signal";
  if (watch_->factor != 1) limit += ", x" + std::to_string(int(watch_->factor)) + " during " + watch_->phase;
  limit += ")";
  // The world's lowest ranks are asked too: whether one of them waits as well decides who reports.
  std::vector<int> ask = waited_on(w);
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  for (int r = 0; r < std::min(world, 4); ++r) ask.push_back(r);
  int lowest = -1;
  const std::string found = inquire(ask, lowest);
  leave_report_to(lowest);
  if (w.peer >= 0) {
    const int peer = world_ranks_[static_cast<std::size_t>(w.peer)];
    DIT_FAIL("communication timeout: waited ", limit, " for ", describe(w), " during ", watch_->where(), "; ",
             found.empty() ? "rank " + std::to_string(peer) + " stopped making progress (stopped, hung, or cut off from this one)"
                           : found);
  }
  DIT_FAIL("communication timeout: waited ", limit, " in ", w.op, " over ", group(), " during ", watch_->where(), "; ",
           found.empty() ? std::string("a rank of that group stopped making progress (stopped, hung, or cut off)") : found);
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
  CallTimer t(stats_, 0);
  --stats_.calls;
  MPI_Request r;
  DIT_MPI_CHECK(MPI_Ibarrier(comm_, &r));
  complete(r, {"barrier"});
}

double MpiComm::all_reduce_max(double v) {
  CallTimer t(stats_, 0);  // its seconds, not a call of the counted traffic
  --stats_.calls;
  double out = v;
  MPI_Request r;
  DIT_MPI_CHECK(MPI_Iallreduce(&v, &out, 1, MPI_DOUBLE, MPI_MAX, comm_, &r));
  complete(r, {"all-reduce (max)"});
  return out;
}

void MpiComm::all_reduce_sum(double* v, int n) {
  if (size_ == 1) return;
  CallTimer t(stats_, 0);
  --stats_.calls;
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

void MpiComm::progress() {
  for (auto& [id, p] : requests_) {
    int done = 0;
    DIT_MPI_CHECK(MPI_Test(&p.request, &done, MPI_STATUS_IGNORE));  // a completed request becomes null
  }
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
