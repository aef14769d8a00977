// Agreed failures and world-size arithmetic (see collective.h).
#include "app/collective.h"

#include "app/memory_check.h"
#include "backend/cpu/cpu_backend.h"
#include "parallel/device_placement.h"
#include "parallel/mpi_comm.h"

#include <mpi.h>
#include <omp.h>
#include <sched.h>

#include <cstdio>
#include <string>

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
  std::string msg;
  try {
    check();
  } catch (const std::exception& e) {
    msg = describe_exception(e);
  }
  int me = msg.empty() ? world_size() : world_rank(), first = me;
  MPI_Allreduce(&me, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (first == world_size()) return;
  if (first == world_rank()) print_error(msg.c_str());
  throw AgreedFailure{};
}

void fit_threads_to_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return;
  const int cores = CPU_COUNT(&set), threads = omp_get_max_threads();
  if (cores >= threads || cores < 1) return;
  cpu_set_num_threads(cores);
  if (world_rank() == 0)
    std::printf("note: %d OpenMP threads requested but rank 0 may run on %d core(s) (mpirun binds ranks to "
                "cores); using %d. Pass --bind-to none to mpirun to let threads spread.\n",
                threads, cores, cores);
}

Layout layout_for_world(int tp, int pp) {
  const int n = world_size();
  DIT_CHECK(tp >= 1 && pp >= 1, "--tp ", tp, " --pp ", pp, ": both must be at least 1");
  DIT_CHECK(n % (tp * pp) == 0, "the job has ", n, " ranks, which is not a multiple of tp x pp = ",
            tp, " x ", pp, " = ", tp * pp, "; run with a multiple of ", tp * pp,
            " ranks (e.g. mpirun -np ", tp * pp, ")");
  return Layout{tp, pp, n / (tp * pp)};
}

std::string backend_name(const std::string& backend, const std::string& precision) {
  const std::size_t colon = backend.find(':');
  if (colon == std::string::npos) return backend + ":" + precision;
  const std::string named = backend.substr(colon + 1);
  DIT_CHECK(precision == "fp32" || parse_dtype(named) == parse_dtype(precision), "backend ", backend,
            " names ", named, " but the precision is ", precision);
  return backend;
}

std::unique_ptr<Backend> make_rank_backend(const std::string& backend, const std::string& precision) {
  std::string name;
  collective_check([&] { name = backend_name(backend, precision); });
  // Every rank asks for the same backend, so every rank takes part in the placement (collective).
  if (name.rfind("cuda", 0) == 0 && mpi_running()) place_rank_on_gpu();
  std::unique_ptr<Backend> be;
  collective_check([&] {
    std::string why;
    DIT_CHECK(backend_available(name, &why), "backend ", name, " is not available: ", why);
    be = make_backend(name);
  });
  return be;
}

}  // namespace dit
