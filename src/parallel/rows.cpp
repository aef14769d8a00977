// Rows dealt out over the world and gathered back (see rows.h).
#include "parallel/rows.h"

#include <mpi.h>

#include <climits>

#include "core/error.h"
#include "parallel/world.h"

namespace dit {

namespace {

// One MPI datatype per row, so counts are rows and a table of more than 2^31 floats still moves.
struct RowType {
  MPI_Datatype type = MPI_DATATYPE_NULL;
  RowType(std::int64_t width, MPI_Datatype value) {
    DIT_CHECK(width >= 1 && width <= INT_MAX, "rows of ", width, " values cannot be sent");
    DIT_MPI_CHECK(MPI_Type_contiguous(static_cast<int>(width), value, &type));
    DIT_MPI_CHECK(MPI_Type_commit(&type));
  }
  ~RowType() { MPI_Type_free(&type); }
  RowType(const RowType&) = delete;
  RowType& operator=(const RowType&) = delete;
};

// The row counts and first rows of every rank, as MPI's v-collectives take them.
struct Counts {
  std::vector<int> count, first;
  Counts(std::int64_t n, int ranks) : count(ranks), first(ranks) {
    DIT_CHECK(n >= 0 && n <= INT_MAX, "a table of ", n, " rows cannot be dealt out");
    for (int r = 0; r < ranks; ++r) {
      const RowShare s = row_share(n, r, ranks);
      count[r] = static_cast<int>(s.count);
      first[r] = static_cast<int>(s.first);
    }
  }
};

}  // namespace

RowShare row_share(std::int64_t n, int rank, int ranks) {
  const std::int64_t first = n * rank / ranks, end = n * (rank + 1) / ranks;
  return {first, end - first};
}

Rows scatter_rows(const Rows& all) {
  const int ranks = world_size(), rank = world_rank();
  if (ranks == 1) return all;
  if (rank == 0)
    DIT_CHECK(static_cast<std::int64_t>(all.values.size()) == all.n * all.width, "scatter_rows: ",
              all.values.size(), " values for ", all.n, " rows of ", all.width);
  std::int64_t shape[2] = {all.n, all.width};
  DIT_MPI_CHECK(MPI_Bcast(shape, 2, MPI_INT64_T, 0, MPI_COMM_WORLD));
  Rows mine;
  mine.width = shape[1];
  const RowShare s = row_share(shape[0], rank, ranks);
  mine.n = s.count;
  mine.values.resize(static_cast<std::size_t>(s.count * mine.width));
  if (mine.width == 0) return mine;
  const RowType row(mine.width, MPI_FLOAT);
  const Counts c(shape[0], ranks);
  DIT_MPI_CHECK(MPI_Scatterv(rank == 0 ? all.values.data() : nullptr, c.count.data(), c.first.data(), row.type,
                             mine.values.data(), c.count[rank], row.type, 0, MPI_COMM_WORLD));
  return mine;
}

namespace {

// Every rank's `rows` rows of `width` values stacked on rank 0 (into `all`, sized there); returns
// the total number of rows.
template <class T>
std::int64_t gather(const std::vector<T>& mine, std::int64_t rows, std::int64_t width, MPI_Datatype value,
                    std::vector<T>& all) {
  const int ranks = world_size(), rank = world_rank();
  DIT_CHECK(static_cast<std::int64_t>(mine.size()) == rows * width, "gather_rows: ", mine.size(), " values for ",
            rows, " rows of ", width);
  std::int64_t n = rows;
  DIT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &n, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD));
  const Counts c(n, ranks);
  DIT_CHECK(c.count[rank] == rows, "gather_rows: rank ", rank, " holds ", rows, " rows, its share of ", n, " is ",
            c.count[rank]);
  if (rank == 0) all.resize(static_cast<std::size_t>(n * width));
  if (width == 0) return n;
  const RowType row(width, value);
  DIT_MPI_CHECK(MPI_Gatherv(mine.data(), c.count[rank], row.type, all.data(), c.count.data(), c.first.data(),
                            row.type, 0, MPI_COMM_WORLD));
  return n;
}

}  // namespace

Rows gather_rows(const Rows& mine) {
  if (world_size() == 1) return mine;
  Rows all;
  all.width = mine.width;
  const std::int64_t n = gather(mine.values, mine.n, mine.width, MPI_FLOAT, all.values);
  if (world_rank() == 0) all.n = n;
  return all;
}

std::vector<double> gather_rows(const std::vector<double>& mine, std::int64_t rows, std::int64_t width) {
  if (world_size() == 1) return mine;
  std::vector<double> all;
  gather(mine, rows, width, MPI_DOUBLE, all);
  return all;
}

std::vector<std::int64_t> broadcast_values(std::vector<std::int64_t> values) {
  if (world_size() == 1) return values;
  std::int64_t size = static_cast<std::int64_t>(values.size());
  DIT_MPI_CHECK(MPI_Bcast(&size, 1, MPI_INT64_T, 0, MPI_COMM_WORLD));
  values.resize(static_cast<std::size_t>(size));
  DIT_MPI_CHECK(MPI_Bcast(values.data(), static_cast<int>(size), MPI_INT64_T, 0, MPI_COMM_WORLD));
  return values;
}

}  // namespace dit
