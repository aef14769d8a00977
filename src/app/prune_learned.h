// `dit_mp prune --method learned`: TinyFusion's learned depth pruning (engine/layer_gates.h) as a
// short training run of the teacher with gated blocks, at any layout, under mpirun. The teacher's
// weights train too (full updates at --lr; --lr 0 trains the logits alone), but the pruned file
// keeps the teacher's ORIGINAL weights of the chosen blocks: the search only decides which.
#pragma once

#include <string>
#include <vector>

#include "engine/layer_gates.h"
#include "engine/train_setup.h"
#include "io/config.h"

namespace dit {

struct PruneOptions;

struct LearnedPrune {
  RunConfig cfg;      // the learning run: the teacher's model, the recipe, data, steps, layout
  TrainSetup setup;   // with setup.train.gates
  std::string teacher;
  int log_every = 0;
};

// Checks the learned method's options against the teacher (every rank): groups that tile its
// depth and keep `depth` blocks, steps, learning rates, tau and scaling, the layout and --set.
LearnedPrune resolve_learned(const PruneOptions& opt, const std::string& teacher, const DiTConfig& model,
                             diffusion::Objective objective, int diffusion_steps, int depth);
// Collective: trains the gates for the run's steps and returns the blocks the EMA logits keep
// (model order). Rank 0 prints progress with an ETA and each change of the decision.
std::vector<int> learn_kept_blocks(const LearnedPrune& job);

}  // namespace dit
