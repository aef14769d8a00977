// The layout a `train` job runs at when parallel.layout = "auto": the planner's search
// (plan/auto_layout.h) for this job, or, when a resumed run's folder records a layout that still
// divides the job and fits, that one. Every rank ends with the same config: rank 0 searches and
// broadcasts the choice (the default), or every rank searches and the ranks check that they agree
// (DIT_LAYOUT_SEARCH=each; the search is deterministic).
#pragma once

#include <functional>
#include <string>

#include "io/config.h"
#include "plan/planner.h"

namespace dit {

// The settings the search may not change: those the command line gave (a flag or --set), which
// `gave` tells by key ("parallel.tp"), at their values in `cfg`.
FitConstraints fit_constraints(const std::function<bool(const std::string&)>& gave, const RunConfig& cfg);

// Collective. `cfg` with its layout chosen (parallel.layout stays "auto", so the run's
// config.toml records both the request and the layout it ran at); rank 0 prints the choice.
// Throws AgreedError on every rank when nothing fits.
RunConfig resolve_auto_layout(const RunConfig& cfg, const FitConstraints& fixed);

}  // namespace dit
