// `dit_mp train` (the default subcommand): its flags and what it runs. Every rank checks the
// inputs together (one message on a bad one), takes the run folder's lock, prepares the demo's
// data on first use, and hands the run to run/Run.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "io/config.h"
#include "plan/planner.h"

namespace dit {

// DryRun checks the inputs and prints the layout and the rank map (node, cores or GPU, tp/pp/dp
// of every rank), then stops: nothing is written, the run folder is not touched.
enum class TrainMode { Train, DryRun };

// Trains as `cfg` says at tp x pp x (world / tp / pp). Returns the exit code: 0, 1 on an error,
// kExitPreempted (75, run/signals.h) when stopped by a signal after a checkpoint. Under
// parallel.layout = "tune" a fresh run first measures the search's layouts within `fixed` (the
// settings the command line gave) and trains on the fastest (run/layout_tune.h).
int run_train(const RunConfig& cfg, TrainMode mode = TrainMode::Train, const FitConstraints& fixed = {});

// The flags `train` and `plan` share; each becomes a `section.key=value` override applied after
// the config file.
struct TrainFlags {
  std::string config;
  std::vector<std::string> sets;
  std::vector<std::pair<std::string, std::string>> flags;  // (key, value text)
  bool overwrite = false;
  bool dry_run = false;
  bool gave(const std::string& key) const;  // the command line set `key` (by a flag or --set)
};
void add_train_options(CLI::App* cmd, TrainFlags& f);
// The config file (or the demo), then --set, then the flags; validated.
RunConfig resolve_config(const TrainFlags& f);

// Registers `train` on `app`; returns what runs it once the command line is parsed.
std::function<int()> add_train_command(CLI::App& app);

}  // namespace dit
