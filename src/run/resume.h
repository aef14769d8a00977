// How a run begins: from scratch, continuing a checkpoint (--resume, written at any layout), or
// from weights (--init-from: a checkpoint or a weights file, with fresh optimizer state and the
// EMA at those weights).
#pragma once

#include <optional>
#include <string>

#include "engine/trainer.h"
#include "io/config.h"
#include "io/saved_meaning.h"
#include "run/log.h"

namespace dit {

// Collective. Restores `trainer` as run.resume / run.init_from of `cfg` say, from checkpoints
// under `root`; a resumed run's metrics rows after its checkpoint go. Rank 0 says what it did.
// A resume is refused, before its first step, when the checkpoint means something else than the
// run's config (io/saved_meaning.h), was distilled from another teacher, or belongs to another
// run than cfg.run.id (run/run_identity.h; "" accepts any). Returns the resumed checkpoint's
// metadata, or nothing when the run starts fresh or from weights. `data`: what the run trains on
// (a setting unused by it, data.latent_scale on pixels, is not compared).
std::optional<CheckpointMeta> start_from_checkpoint(const RunConfig& cfg, const std::string& root,
                                                   const DiTConfig& model, ParallelContext& ctx, Trainer& trainer,
                                                   ConsoleLog& console, DataKind data);

}  // namespace dit
