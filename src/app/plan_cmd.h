// `dit_mp plan`: the per-rank memory of a layout before running it (the trainer's own
// allocations, plan/planner.h), its predicted step time (--predict, plan/predict.h), or --fit:
// the layouts that fit given GPUs, ranked.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace dit {

std::function<int()> add_plan_command(CLI::App& app);

}  // namespace dit
