// How a run begins: from scratch, continuing a checkpoint (--resume, written at any layout), or
// from weights (--init-from: a checkpoint or a weights file, with fresh optimizer state and the
// EMA at those weights).
#pragma once

#include <string>

#include "engine/trainer.h"
#include "io/config.h"
#include "run/log.h"

namespace dit {

// Collective. Restores `trainer` as run.resume / run.init_from of `cfg` say, from checkpoints
// under `root`; a resumed run's metrics rows after its checkpoint go. Rank 0 says what it did.
void start_from_checkpoint(const RunConfig& cfg, const std::string& root, const DiTConfig& model,
                           ParallelContext& ctx, Trainer& trainer, ConsoleLog& console);

}  // namespace dit
