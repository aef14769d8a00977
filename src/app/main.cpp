// dit_mp entry point: MPI start-up, the command line, and the one place errors are reported.
// `train` is the default subcommand (`mpirun -np 8 dit_mp --tp 2 --pp 4`). Each subcommand's file
// registers its flags and what runs it. Library code throws; input errors found while setting up,
// and failures of collective steps such as a checkpoint's save or load, are agreed on by all ranks
// (one message, every rank exits non-zero); any other failure later, when ranks may be inside
// collectives, is printed by its rank and takes the job down with MPI_Abort (mpirun -q keeps
// mpirun's own banners out).
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <exception>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "io/command_files.h"
#include "app/data_cmd.h"
#include "app/evaluate_cmd.h"
#include "app/plan_cmd.h"
#include "app/prune_cmd.h"
#include "app/report_cmd.h"
#include "app/sample_cmd.h"
#include "app/train_cmd.h"
#include "app/verify_cmd.h"
#include "core/error.h"
#include "engine/rank_backend.h"
#include "parallel/world.h"
#include "run/signals.h"

namespace {

const char* const kSubcommands[] = {"train", "sample", "evaluate", "verify", "prepare-data", "inspect", "plan", "prune", "report", "help"};

// The command line trains: `train` given, or no subcommand (train is the default).
bool trains(int argc, char** argv) {
  if (argc < 2) return true;
  const std::string first = argv[1];
  if (first == "--help" || first == "-h" || first == "--version") return false;
  for (const char* s : kSubcommands)
    if (first == s) return first == "train";
  return true;
}

// `train` is the default: insert it when the first argument is not a subcommand.
std::vector<std::string> with_default_subcommand(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  const bool top_level = !args.empty() && (args[0] == "--help" || args[0] == "-h" || args[0] == "--version");
  bool has_sub = false;
  if (!args.empty())
    for (const char* s : kSubcommands) has_sub |= args[0] == s;
  if (!has_sub && !top_level) args.insert(args.begin(), "train");
  if (!args.empty() && args[0] == "help") args[0] = "--help";
  std::reverse(args.begin(), args.end());  // CLI11 parses a reversed vector
  return args;
}

int run(int argc, char** argv);

// `dit_mp help check-files`: each line of stdin is a command line (arguments separated by tabs),
// run only up to its files' check; prints one line for each: "passed", "refused\t<message>", or
// "ran\t<exit code>" (a command that never reached its check). One process for a table of tries.
int check_files_batch() {
  dit::set_files_check_only(true);
  for (std::string line; std::getline(std::cin, line);) {
    std::vector<std::string> words = {"dit_mp"};
    for (std::size_t at = 0, tab; at <= line.size(); at = tab + 1) {
      tab = std::min(line.find('\t', at), line.size());
      words.push_back(line.substr(at, tab - at));
    }
    std::vector<char*> args;
    for (std::string& w : words) args.push_back(w.data());
    std::string result;
    try {
      result = "ran\t" + std::to_string(run(int(args.size()), args.data()));
    } catch (const std::exception& e) {
      const std::string what = e.what();
      result = what.rfind(dit::kFilesPassed, 0) == 0 ? "passed" : "refused\t" + what.substr(0, what.find('\n'));
    }
    std::printf("%s\n", result.c_str());
    std::fflush(stdout);
  }
  return 0;
}

int run(int argc, char** argv) {
  CLI::App app{"dit_mp: trains Diffusion Transformers (DiT) split over MPI ranks: tensor (--tp), pipeline (--pp) "
               "and data parallelism (the remaining ranks).\n  mpirun -np 8 dit_mp --tp 2 --pp 4     trains the "
               "Fashion-MNIST demo\n  mpirun -np 8 dit_mp --config my.toml --layout auto --memory-gib 40     the planner "
               "chooses the layout (flags given, e.g. --tp 2, constrain it; pin one with --tp/--pp/--micro-batch)\n"};
  app.name("dit_mp");
  app.require_subcommand(0, 1);
  app.set_version_flag("--version", "dit_mp 0.1");
  // Each returns -1 when its subcommand was not the one given, else the exit code.
  const std::vector<std::function<int()>> commands = {
      dit::add_train_command(app),        dit::add_sample_command(app), dit::add_evaluate_command(app),
      dit::add_verify_command(app),       dit::add_prepare_data_command(app), dit::add_plan_command(app),
      dit::add_inspect_command(app),      dit::add_prune_command(app),        dit::add_report_command(app),
  };
  // Hidden: every subcommand's files by role, one line each, and the batch of tries that
  // tests/cli/file_roles_table.sh makes of them.
  if (argc == 3 && std::string(argv[1]) == "help" && std::string(argv[2]) == "files") {
    if (dit::world_rank() == 0) std::printf("%s", dit::describe_file_roles(dit::command_files()).c_str());
    return 0;
  }
  if (argc == 3 && std::string(argv[1]) == "help" && std::string(argv[2]) == "check-files") return check_files_batch();
  std::vector<std::string> args = with_default_subcommand(argc, argv);
  dit::fit_threads_to_cores();
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    return dit::world_rank() == 0 ? app.exit(e) : (e.get_exit_code() != 0);
  }
  for (const auto& command : commands)
    if (const int rc = command(); rc >= 0) return rc;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // A stop request (preemption, a time limit's warning) may come while the job is still starting:
  // recorded from the first instant, it stops the run at its first step boundary with a checkpoint
  // instead of killing a rank inside MPI_Init.
  if (trains(argc, argv)) dit::install_stop_handlers();
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  int rc = 1;
  try {
    rc = run(argc, argv);
  } catch (const dit::AgreedError& e) {  // every rank has it: one prints, none aborts
    if (dit::world_rank() == 0) dit::print_error(e.what(), e.origin_rank());
    rc = 1;
  } catch (const std::exception& e) {
    dit::print_error(dit::describe_exception(e).c_str());
    if (dit::world_size() > 1) MPI_Abort(MPI_COMM_WORLD, 1);
    rc = 1;
  }
  // Every rank ends with the worst exit code (e.g. verify's result, known on rank 0), even when
  // mpirun stops the others with SIGTERM once one has exited.
  dit::defer_stop_signals();
  int worst = rc;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}
