// The world, its errors and its agreed setup checks (see world.h).
#include "parallel/world.h"

#include <mpi.h>

#include <cstdio>
#include <memory>
#include <string>

#include "core/error.h"
#include "parallel/agree.h"
#include "parallel/mpi_comm.h"
#include "parallel/watchdog.h"

namespace dit {

int world_rank() {
  int inited = 0, rank = 0;
  MPI_Initialized(&inited);
  if (inited) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

int world_size() {
  int inited = 0, size = 1;
  MPI_Initialized(&inited);
  if (inited) MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

void print_error(const char* what, int rank) {
  // One line whatever the message holds (toml11 and HDF5 texts span lines): line breaks and the
  // indentation after them become one space.
  std::string line;
  for (const char* p = what; *p; ++p) {
    if (*p == '\n' || *p == '\r') {
      while (!line.empty() && line.back() == ' ') line.pop_back();
      while (p[1] == ' ' || p[1] == '\n' || p[1] == '\r' || p[1] == '\t') ++p;
      if (!line.empty()) line += ' ';
    } else {
      line += *p;
    }
  }
  std::fprintf(stderr, "dit_mp: rank %d: error: %s\n", rank < 0 ? world_rank() : rank, line.c_str());
  std::fflush(stderr);
}

void collective_check(const std::function<void()>& check) {
  if (!mpi_running()) return check();  // a process without MPI (unit tests): nothing to agree on
  // Setup steps may take long on one rank (preparing data, training the evaluation classifier):
  // the others wait without a watchdog, as they wait for it in MPI_Init.
  auto watch = std::make_shared<CommWatch>();
  watch->timeout_s = 0;
  agree(*MpiComm::world(watch), check);
}

Layout layout_for_world(int tp, int pp) {
  const int n = world_size();
  DIT_CHECK(tp >= 1 && pp >= 1, "a layout of tp ", tp, " x pp ", pp, ": both must be at least 1");
  DIT_CHECK(n % (tp * pp) == 0, "the job has ", n, " ranks, which is not a multiple of tp x pp = ",
            tp, " x ", pp, " = ", tp * pp, "; run with a multiple of ", tp * pp,
            " ranks (e.g. mpirun -np ", tp * pp, ")");
  return Layout{tp, pp, n / (tp * pp)};
}

}  // namespace dit
