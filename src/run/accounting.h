// The per-rank accounting of a run's last step: time, communication bytes, pipeline bubble and
// memory by category (the numbers `dit_mp plan` predicts), printed as a table by rank 0 and
// written to accounting.json.
#pragma once

#include <string>

#include "engine/trainer.h"

namespace dit {

// Collective over ctx.world: every rank contributes its row; rank 0 prints and writes `json_path`.
// `attention` is what rank 0's backend says of its attention path (a cuDNN fallback, or ""); it is
// recorded in rank 0's row. `unplanned` (>= 0 where the backend reads its device's memory: the
// CUDA context and library workspaces the plan leaves out, run/plan_check.h) is written as
// unplanned_bytes.
void report_accounting(ParallelContext& ctx, const StepAccounting& a, const MemoryAccount& mem,
                       const std::string& json_path, const std::string& attention = "", double unplanned = -1);

}  // namespace dit
