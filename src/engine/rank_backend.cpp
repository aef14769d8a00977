// This rank's backend and threads (see rank_backend.h).
#include "engine/rank_backend.h"

#include <omp.h>
#include <sched.h>

#include <cstdio>

#include "backend/cpu/cpu_backend.h"
#include "parallel/backend_comms.h"
#include "parallel/device_placement.h"
#include "parallel/mpi_comm.h"
#include "parallel/world.h"

namespace dit {

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

RankSetup make_rank(const RankRequest& r) {
  RankSetup rank;
  if (!r.backend.empty()) rank.backend = make_rank_backend(r.backend, r.precision);
  if (mpi_running()) {
    rank.ctx = make_mpi_context(r.layout);
  } else {  // a process without MPI (unit tests): one rank on its own
    DIT_CHECK(r.layout.world() == 1, "layout ", r.layout.str(), " needs ", r.layout.world(),
              " ranks, but this process runs without MPI");
    rank.ctx = make_single_context();
  }
  rank.ctx.watch->timeout_s = r.timeout_s;
  rank.ctx.watch->timeout_setting = r.timeout_setting;
  rank.ctx.watch->stop_signal = r.stop_signal;
  if (rank.backend && r.comms == TensorComms::Attach) rank.comms = attach_backend_comms(rank.ctx, *rank.backend);
  if (r.backend.rfind("cuda", 0) == 0) rank.device = "cuda:" + std::to_string(place_rank_on_gpu().device);
  return rank;
}

}  // namespace dit
