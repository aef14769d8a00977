// The rank grid: world = tp x pp x dp, tensor-parallel ranks fastest (adjacent ranks, so a tp
// group sits on one node), then data-parallel, then pipeline stages:
//   world_rank = tp_rank + tp * (dp_rank + dp * pp_rank)
// Worked example, 8 ranks with tp 2, pp 2, dp 2:
//   rank:     0 1 2 3 4 5 6 7
//   tp_rank:  0 1 0 1 0 1 0 1
//   dp_rank:  0 0 1 1 0 0 1 1
//   pp_rank:  0 0 0 0 1 1 1 1
//   tp groups {0,1} {2,3} {4,5} {6,7}; dp groups {0,2} {1,3} {4,6} {5,7};
//   pp groups (stage 0 -> 1) {0,4} {1,5} {2,6} {3,7}.
// A ParallelContext holds this rank's coordinates and one communicator per axis; it is passed to
// whoever needs it (no globals).
#pragma once

#include <memory>
#include <string>

#include "parallel/comm.h"
#include "parallel/watchdog.h"

namespace dit {

struct Layout {
  int tp = 1, pp = 1, dp = 1;
  int world() const { return tp * pp * dp; }
  std::string str() const;  // "tp 2 pp 4 dp 1"
};

struct GridCoord {
  int tp = 0, pp = 0, dp = 0;
};

GridCoord grid_coord(const Layout& l, int world_rank);
int grid_rank(const Layout& l, const GridCoord& c);

struct ParallelContext {
  Layout layout;
  GridCoord coord;
  int world_rank = 0;
  std::unique_ptr<Comm> world, tp, pp, dp;
  // The watchdog's timeout and the run's position, shared by the MPI communicators (never null).
  std::shared_ptr<CommWatch> watch = std::make_shared<CommWatch>();

  bool first_stage() const { return coord.pp == 0; }
  bool last_stage() const { return coord.pp == layout.pp - 1; }
};

// Machines in the job: the number of shared-memory groups of MPI_COMM_WORLD. The first call is a
// collective of every rank (make it at start-up); later calls return the same number at no cost.
int node_count();

// One rank on its own: every communicator is a SelfComm.
ParallelContext make_single_context();
// Splits MPI_COMM_WORLD by the layout; the world size must equal tp * pp * dp (checked with a
// message naming the numbers and a fitting dp).
ParallelContext make_mpi_context(const Layout& layout);
// The same over the given communicator (tests run several layouts inside one job).
ParallelContext make_mpi_context(const Layout& layout, std::unique_ptr<Comm> world);

}  // namespace dit
