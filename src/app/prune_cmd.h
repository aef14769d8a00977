// `dit_mp prune`: a smaller DiT from a trained one by depth pruning (engine/prune.h): the blocks
// kept are given (--method index --keep i,j,...) or chosen by a block-importance score on a
// calibration batch (--method score --score cos|loss), or learned by gated training of the teacher
// (--method learned, run/learned_prune.h). Checked on every rank; index and score run on world
// rank 0 on the CPU backend with the whole model (the others wait, and a failure is agreed);
// learned trains on every rank at the --tp x --pp layout, and rank 0 writes.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

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
  // learned (run/learned_prune.h): the groups, the training run and its gates
  std::string groups;                   // "M:N,..." ("" = 2 of every 2r blocks, or 1 of r)
  std::int64_t steps = 100;
  double lr = 1e-4, gate_lr = 0;        // gate_lr 0 = 10 x lr
  int lora = 0;                         // LoRA rank (0: full updates of the weights at lr)
  double gate_ema = 0.999;              // the EMA decay of the logits (the EMA decides)
  std::vector<double> tau = {4.0, 0.1}, scaling = {100.0, 100.0};
  int tp = 1, pp = 1, log_every = 0;
  std::vector<std::string> sets;        // --set KEY=VALUE of the learning run
  bool learned_given = false;           // any learned-only option was given
};

int run_prune(const PruneOptions& opt);

std::function<int()> add_prune_command(CLI::App& app);

}  // namespace dit
