// Learned depth pruning's training (TinyFusion's learned method, engine/layer_gates.h): a short run
// of the teacher with gated blocks, at any layout, under mpirun, with no run folder. It trains
// through the Trainer's loop like every run; its gates and LoRA adapters are step parts
// (engine/step_parts.h). The teacher's weights train too (full updates at the run's lr; lr 0
// trains the logits alone), but `dit_mp prune` keeps the teacher's ORIGINAL weights of the chosen
// blocks: the search only decides which.
#pragma once

#include <string>
#include <vector>

#include "engine/train_setup.h"
#include "io/config.h"

namespace dit {

struct LearnedPrune {
  RunConfig cfg;      // the learning run: the teacher's model, the recipe, data, steps, layout
  TrainSetup setup;   // with setup.train.gates (and setup.train.lora)
  std::string teacher;
  int log_every = 0;
};

// Collective: trains the gates for the run's steps and returns the blocks the EMA logits keep
// (model order). Rank 0 prints progress with an ETA and each change of the decision.
std::vector<int> learn_kept_blocks(const LearnedPrune& job);

}  // namespace dit
