// dit_mp entry point: MPI start-up, subcommand dispatch, and the one place errors are reported.
// Library code throws. Input errors found while setting up are agreed on by all ranks: the lowest
// failing rank prints one message and every rank exits non-zero. A failure later, when ranks may
// be inside collectives, is printed by its rank and takes the job down with MPI_Abort.
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <functional>

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

void print_error(const char* what) {
  std::fprintf(stderr, "dit_mp: rank %d: error: %s\n", world_rank(), what);
  std::fflush(stderr);
}

// Thrown on every rank after an agreed setup failure (already reported).
struct AgreedFailure {};

// Runs `check` on every rank (it must not communicate). If it throws on any rank, the lowest
// failing rank prints its message and every rank throws AgreedFailure.
void collective_check(const std::function<void()>& check) {
  std::string msg;
  try {
    check();
  } catch (const std::exception& e) {
    msg = e.what();
  }
  int me = msg.empty() ? world_size() : world_rank(), first = me;
  MPI_Allreduce(&me, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (first == world_size()) return;
  if (first == world_rank()) print_error(msg.c_str());
  throw AgreedFailure{};
}

// dp from the world size, or a message naming the numbers and what would fit.
dit::Layout layout_for_world(int tp, int pp) {
  const int n = world_size();
  DIT_CHECK(tp >= 1 && pp >= 1, "--tp ", tp, " --pp ", pp, ": both must be at least 1");
  DIT_CHECK(n % (tp * pp) == 0, "the job has ", n, " ranks, which is not a multiple of tp x pp = ",
            tp, " x ", pp, " = ", tp * pp, "; run with a multiple of ", tp * pp, " ranks (e.g. mpirun -np ",
            tp * pp, ")");
  return dit::Layout{tp, pp, n / (tp * pp)};
}

int run(int argc, char** argv) {
  CLI::App app{"dit_mp: Diffusion Transformer training split over MPI ranks "
               "(tensor, pipeline and data parallelism)"};
  app.require_subcommand(0, 1);
  app.set_version_flag("--version", "dit_mp 0.1");

  dit::VerifyOptions vopt;
  std::string groups, schedule = "1f1b";
  int tp = 1, pp = 1;
  auto* verify = app.add_subcommand(
      "verify", "Check the model against a golden file of float64 numbers from the official DiT, "
                "at any layout (mpirun -np N dit_mp verify --golden F --tp T --pp P)");
  verify->add_option("--golden", vopt.golden, "Golden HDF5 file")->required();
  verify->add_option("--groups", groups,
                     "Comma-separated groups: forward,schedule,loss,adamw,ema,sample (default: all in the file)");
  verify->add_option("--backend", vopt.backend, "Compute backend: cpu or cuda")->capture_default_str();
  verify->add_option("--tp", tp, "Tensor-parallel size")->capture_default_str();
  verify->add_option("--pp", pp, "Pipeline stages")->capture_default_str();
  verify->add_option("--microbatches", vopt.microbatches,
                     "Microbatches per data-parallel rank for the forward and loss groups")->capture_default_str();
  verify->add_option("--schedule", schedule, "Pipeline schedule: 1f1b or gpipe")->capture_default_str();

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
    dit::Layout layout;
    collective_check([&] {
      vopt.schedule = dit::parse_schedule(schedule);
      layout = layout_for_world(tp, pp);
      dit::check_verify_inputs(vopt, layout);
    });
    dit::ParallelContext ctx = dit::make_mpi_context(layout);
    return dit::run_verify(vopt, ctx);
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
  } catch (const AgreedFailure&) {
    rc = 1;
  } catch (const std::exception& e) {
    print_error(e.what());
    if (world_size() > 1) MPI_Abort(MPI_COMM_WORLD, 1);
    rc = 1;
  }
  // A failed check on rank 0 only (e.g. verify's result) still ends every rank with its code.
  int worst = rc;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}
