// dit_mp entry point: MPI start-up, subcommand dispatch, and the one place errors are reported.
// Library code throws; here a failure is printed once as "rank r: ..." and every rank is taken
// down (MPI_Abort), so a bad input never leaves other ranks waiting.
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "app/verify.h"
#include "core/error.h"

namespace {

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

[[noreturn]] void fail_all(const char* what) {
  std::fprintf(stderr, "dit_mp: rank %d: error: %s\n", world_rank(), what);
  std::fflush(stderr);
  if (world_size() > 1) MPI_Abort(MPI_COMM_WORLD, 1);
  MPI_Finalize();
  std::exit(1);
}

int run(int argc, char** argv) {
  CLI::App app{"dit_mp: Diffusion Transformer training split over MPI ranks "
               "(tensor, pipeline and data parallelism)"};
  app.require_subcommand(0, 1);
  app.set_version_flag("--version", "dit_mp 0.1");

  dit::VerifyOptions vopt;
  std::string groups;
  auto* verify = app.add_subcommand(
      "verify", "Check the model against a golden file of float64 numbers from the official DiT");
  verify->add_option("--golden", vopt.golden, "Golden HDF5 file")->required();
  verify->add_option("--groups", groups,
                     "Comma-separated groups to check (default: every group in the file)");
  verify->add_option("--backend", vopt.backend, "Compute backend: cpu or cuda")
      ->capture_default_str();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = world_rank() == 0 ? app.exit(e) : (e.get_exit_code() != 0);
    return rc;
  }
  if (*verify) {
    std::stringstream ss(groups);
    for (std::string g; std::getline(ss, g, ',');)
      if (!g.empty()) vopt.groups.push_back(g);
    return dit::run_verify(vopt);
  }
  if (world_rank() == 0) std::printf("%s", app.help().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  int rc = 1;
  try {
    rc = run(argc, argv);
  } catch (const std::exception& e) {
    fail_all(e.what());
  }
  if (rc != 0 && world_size() > 1) MPI_Abort(MPI_COMM_WORLD, rc);
  MPI_Finalize();
  return rc;
}
