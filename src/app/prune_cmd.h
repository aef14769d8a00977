// `dit_mp prune`: a smaller DiT from a trained one by depth pruning (engine/prune.h): the blocks
// kept are given (--method index --keep i,j,...) or chosen by a block-importance score on a
// calibration batch (--method score --score cos|loss). Checked on every rank, done on world rank 0
// on the CPU backend with the whole model; the others wait, and a failure is agreed.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <CLI/CLI.hpp>

namespace dit {

struct PruneOptions {
  std::string run_dir;   // a training run folder (its ema.h5 and config.toml), or
  std::string weights;   // a weights file
  std::string data;      // the calibration dataset ("" = the run's data.path, or the demo's)
  int depth = 0;         // the student's blocks
  std::string method;    // index | score
  std::string keep;      // index: "0,3,5"
  std::string score = "cos";  // score: cos | loss
  bool keep_given = false, score_given = false;
  int calibration = 128;  // calibration images (score)
  std::uint64_t seed = 0;
  std::string out;
};

int run_prune(const PruneOptions& opt);

std::function<int()> add_prune_command(CLI::App& app);

}  // namespace dit
