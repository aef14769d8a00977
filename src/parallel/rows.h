// Rows of a table dealt out over the ranks of a communicator and gathered back, for work that is
// the same per row wherever it runs (decoding latents, Inception features): rank r of R holds rows
// [n r / R, n (r + 1) / R), so rank order is row order and a gather restores the table exactly.
// Every wait goes through the communicator, so an MpiComm's watchdog ends the job when a rank
// stops instead of leaving the others waiting.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "parallel/comm.h"
#include "parallel/watchdog.h"

namespace dit {

// n rows of `width` floats each, row after row.
struct Rows {
  std::int64_t n = 0, width = 0;
  std::vector<float> values;
};

// The first row and the number of rows of `rank` among `ranks` for a table of n rows.
struct RowShare {
  std::int64_t first = 0, count = 0;
};
RowShare row_share(std::int64_t n, int rank, int ranks);

// Collective: rank 0's table dealt out; every rank gets its share, with n and width as rank 0 has
// them (the other ranks' `all` is not read). At one rank: `all`.
Rows scatter_rows(Comm& comm, const Rows& all);

// Collective: every rank's share (rows as row_share gives them, all of one width) stacked on rank 0
// in rank order; the other ranks get an empty table of the same width.
Rows gather_rows(Comm& comm, const Rows& mine);

// Collective: rank 0's integers (each of magnitude below 2^53) on every rank.
std::vector<std::int64_t> broadcast_values(Comm& comm, std::vector<std::int64_t> values);

// The world as one communicator of host tensors: MPI_COMM_WORLD under `watch` (a run's; null: the
// watchdog's default timeout, 600 s, with no slow-phase factor), or a one-rank communicator in a
// process without MPI.
std::unique_ptr<Comm> watched_world(std::shared_ptr<CommWatch> watch = nullptr);

}  // namespace dit
