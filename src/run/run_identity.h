// A run's identity (run.id): 128 random bits made when a fresh run starts, kept across its resumes,
// recorded in its config.toml and in every checkpoint's index, so that one run's checkpoints are
// neither written over by a new run nor continued by another run without a word.
#pragma once

#include <string>

#include "io/checkpoint.h"
#include "io/config.h"
#include "parallel/comm.h"

namespace dit {

// Collective over `world`: one new identity, 32 lowercase hex digits from rank 0's random device.
std::string agreed_new_run_id(Comm& world);

// The run.id that <run_dir>/config.toml records, or "" (no folder or file, a config from before
// run ids, or one that does not parse).
std::string recorded_run_id(const std::string& run_dir);

// A fresh run (no run.resume) writes its checkpoints into `root`: throws, naming the folder, the
// run that wrote them and its newest step, when it already holds checkpoints (the default
// <run.dir>/ckpt, or the one its config.toml records inside run.dir, under run.overwrite excepted:
// make_folder clears them).
void check_new_checkpoint_root(const RunConfig& cfg, const std::string& root);

// A resume continues the run whose checkpoint `meta` is. `folder_id` is the run.id of run.dir
// (recorded_run_id, or given with --set run.id); "" accepts any run (a new run.dir). Throws naming
// both runs and files when the checkpoint is another run's; returns a note for a checkpoint
// written before run ids (accepted as this run's), else "".
std::string check_same_run(const CheckpointMeta& meta, const std::string& folder_id, const std::string& run_dir);

}  // namespace dit
