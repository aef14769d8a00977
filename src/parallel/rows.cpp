// Rows dealt out over a communicator and gathered back (see rows.h).
#include "parallel/rows.h"

#include <algorithm>
#include <utility>

#include "core/error.h"
#include "parallel/mpi_comm.h"

namespace dit {

namespace {

constexpr int kRowsTag = 7301;                   // one tag: messages of a pair arrive in order
constexpr std::int64_t kChunkFloats = 1 << 26;  // 256 MiB a message, well inside MPI's int counts

// Non-blocking sends or receives of `count` floats at `data` with `peer`, in chunks.
void post(Comm& comm, bool send, float* data, std::int64_t count, int peer, std::vector<Request>& pending) {
  for (std::int64_t at = 0; at < count; at += kChunkFloats) {
    const Tensor t{data + at, DType::F32, Shape{std::min(kChunkFloats, count - at)}, Device::Host};
    pending.push_back(send ? comm.isend(t, peer, kRowsTag) : comm.irecv(t, peer, kRowsTag));
  }
}

void wait_all(Comm& comm, std::vector<Request>& pending) {
  for (Request& r : pending) comm.wait(r);
  pending.clear();
}

}  // namespace

RowShare row_share(std::int64_t n, int rank, int ranks) {
  const std::int64_t first = n * rank / ranks, end = n * (rank + 1) / ranks;
  return {first, end - first};
}

std::vector<std::int64_t> broadcast_values(Comm& comm, std::vector<std::int64_t> values) {
  if (comm.size() == 1) return values;
  double size = comm.rank() == 0 ? static_cast<double>(values.size()) : 0.0;
  comm.all_reduce_sum(&size, 1);  // the other ranks add zeros: rank 0's numbers, exactly
  std::vector<double> v(static_cast<std::size_t>(size), 0.0);
  if (comm.rank() == 0) std::copy(values.begin(), values.end(), v.begin());
  comm.all_reduce_sum(v.data(), static_cast<int>(v.size()));
  return std::vector<std::int64_t>(v.begin(), v.end());
}

Rows scatter_rows(Comm& comm, const Rows& all) {
  const int ranks = comm.size(), rank = comm.rank();
  if (ranks == 1) return all;
  if (rank == 0)
    DIT_CHECK(static_cast<std::int64_t>(all.values.size()) == all.n * all.width, "scatter_rows: ",
              all.values.size(), " values for ", all.n, " rows of ", all.width);
  const std::vector<std::int64_t> shape = broadcast_values(comm, {all.n, all.width});
  const std::int64_t n = shape[0], width = shape[1];
  const RowShare s = row_share(n, rank, ranks);
  Rows mine{s.count, width, std::vector<float>(static_cast<std::size_t>(s.count * width))};
  std::vector<Request> pending;
  if (rank == 0) {
    float* base = const_cast<float*>(all.values.data());  // only read: sent
    for (int r = 1; r < ranks; ++r) {
      const RowShare o = row_share(n, r, ranks);
      post(comm, true, base + o.first * width, o.count * width, r, pending);
    }
    std::copy(all.values.begin(), all.values.begin() + s.count * width, mine.values.begin());
  } else {
    post(comm, false, mine.values.data(), s.count * width, 0, pending);
  }
  wait_all(comm, pending);
  return mine;
}

Rows gather_rows(Comm& comm, const Rows& mine) {
  const int ranks = comm.size(), rank = comm.rank();
  if (ranks == 1) return mine;
  double rows = static_cast<double>(mine.n);
  comm.all_reduce_sum(&rows, 1);
  const std::int64_t n = static_cast<std::int64_t>(rows), width = mine.width;
  const RowShare s = row_share(n, rank, ranks);
  DIT_CHECK(s.count == mine.n && static_cast<std::int64_t>(mine.values.size()) == mine.n * width, "gather_rows: rank ",
            rank, " holds ", mine.n, " rows (", mine.values.size(), " values of width ", width, "), its share of ", n,
            " is ", s.count);
  Rows all{rank == 0 ? n : 0, width, {}};
  std::vector<Request> pending;
  if (rank == 0) {
    all.values.resize(static_cast<std::size_t>(n * width));
    std::copy(mine.values.begin(), mine.values.end(), all.values.begin());
    for (int r = 1; r < ranks; ++r) {
      const RowShare o = row_share(n, r, ranks);
      post(comm, false, all.values.data() + o.first * width, o.count * width, r, pending);
    }
  } else {
    post(comm, true, const_cast<float*>(mine.values.data()), mine.n * width, 0, pending);
  }
  wait_all(comm, pending);
  return all;
}

std::unique_ptr<Comm> watched_world(std::shared_ptr<CommWatch> watch) {
  if (!mpi_running()) return std::make_unique<SelfComm>();
  if (!watch) {  // a command's own: the shares are even, so no rank waits long for another
    watch = std::make_shared<CommWatch>();
    watch->phase = "dealing out rows";
    watch->factor = 1;
  }
  return MpiComm::world(std::move(watch));
}

}  // namespace dit
