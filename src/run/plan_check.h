// Watching a run against its plan and its memory: after the first step each rank's bytes by
// category (accounting.json's) against the plan of its stage (`dit_mp plan`, the same numbers
// the layout search ranked), and at each log line the free memory against parallel.memory_margin
// (the device's on CUDA, the cgroup's or the machine's on the CPU).
#pragma once

#include <string>
#include <vector>

#include "backend/backend.h"
#include "engine/trainer.h"

namespace dit {

// Collective over ctx.world. One message naming the first rank and category whose measured bytes
// differ from the plan by more than 5% (both numbers, and how many more are off), or "" when all
// agree. `planned` holds one account per pipeline stage.
std::string check_plan(ParallelContext& ctx, const std::vector<MemoryAccount>& planned, const MemoryAccount& measured);

// Collective over ctx.world. A note naming the rank with the least free memory when its share of
// the limit is under `margin`, or "" when every rank has more.
std::string memory_headroom_note(ParallelContext& ctx, const Backend& be, double margin);

// Device bytes in use beyond what the trainer accounts for (the CUDA context, library workspaces,
// the allocator's pool): used - `mem.total()`, from the device's free and total memory; < 0 when
// the backend has no device memory to read. Assumes the device is this rank's alone.
double unplanned_device_bytes(const Backend& be, const MemoryAccount& mem);

}  // namespace dit
