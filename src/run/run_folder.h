// What --overwrite may replace: a run folder that dit_mp recognisably wrote, identified by its
// config.toml (written with dit_mp's header) and made only of the files a run writes there (its
// writers' own temporaries included, never a file merely named like one). Anything else in the folder
// is named and refused; that no input of the run lies inside it is the files' check (io/file_roles.h).
#pragma once

#include <string>
#include <vector>

#include "io/config.h"

namespace dit {

// The checkpoint folders of the run in `dir` that --overwrite replaces with it: ckpt/, and the
// run.checkpoint_dir its config.toml records when that lies directly in `dir`.
std::vector<std::string> checkpoint_folders(const std::string& dir);

// The entries of `dir` that a run did not write (relative names; folders end in '/'); empty when
// everything in it is a run's output.
std::vector<std::string> foreign_entries(const std::string& dir);

// The entries of the checkpoint root `root` that dit_mp did not write: names a save never gives,
// and step folders without a COMPLETE marker ("step_00000001/ (no COMPLETE marker)").
std::vector<std::string> foreign_checkpoint_entries(const std::string& root);

// Throws one line naming the entries of the checkpoint root `root` that dit_mp did not write (a
// save would replace a step folder, keep_checkpoints prune it); a missing root passes.
void check_checkpoint_root(const std::string& root);

// Throws one line naming what --overwrite would not delete: entries dit_mp did not write, or a folder
// that is not a run folder. Call before anything is removed (after check_train_files).
void check_overwritable(const RunConfig& cfg);

// --resume (auto or a checkpoint): run.dir is missing, empty, or a run folder dit_mp wrote (its
// config.toml); a folder of a user's files is refused, as it is without --resume, before a run
// starts there and writes over them.
void check_resumable(const RunConfig& cfg);

// Whether `dir` holds only what a start that failed before its first step left (issue 53): dit_mp's
// config.toml, empty metrics.jsonl and ranks.jsonl, an empty checkpoint folder, TensorBoard's header.
// A rerun replaces such a folder without --overwrite: it holds nothing a run made.
bool holds_failed_start(const std::string& dir);

// Removes the run's outputs from `dir` (after check_overwritable), leaving the folder in place.
void clear_run_folder(const std::string& dir);

}  // namespace dit
