// Rows of a table dealt out over the world's ranks and gathered back, for work that is the same
// per row wherever it runs (decoding latents, Inception features): rank r of R holds rows
// [n r / R, n (r + 1) / R), so rank order is row order and a gather restores the table exactly.
#pragma once

#include <cstdint>
#include <vector>

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

// Collective over the world: rank 0's table dealt out; every rank gets its share, with n and width
// as rank 0 has them (the other ranks' `all` is not read). Without MPI or at one rank: `all`.
Rows scatter_rows(const Rows& all);

// Collective over the world: every rank's share (rows as row_share gives them, all of one width)
// stacked on rank 0 in rank order; the other ranks get an empty table of the same width.
Rows gather_rows(const Rows& mine);
// The same for `rows` rows of `width` doubles each (feature tables); rank 0 gets them all.
std::vector<double> gather_rows(const std::vector<double>& mine, std::int64_t rows, std::int64_t width);

// Collective over the world: rank 0's integers on every rank (e.g. a table's shape).
std::vector<std::int64_t> broadcast_values(std::vector<std::int64_t> values);

}  // namespace dit
