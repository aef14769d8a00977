// The layout a `train` job runs at when parallel.layout = "auto": the planner's search
// (plan/auto_layout.h) for this job, or, when a resumed run's folder records a layout that still
// divides the job and fits, that one. Every rank ends with the same config: rank 0 searches and
// broadcasts the choice (the default), or every rank searches and the ranks check that they agree
// (DIT_LAYOUT_SEARCH=each; the search is deterministic).
#pragma once

#include <functional>
#include <string>
#include <vector>

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

// One of the search's layouts: `cfg` set to it, and what the time model predicts of it.
struct LayoutCandidate {
  RunConfig cfg;
  double predicted_s = 0;      // a step
  double predicted_bytes = 0;  // the largest stage's planned peak per rank
};
// Collective: the search's `k` fastest layouts by the time model that differ in their keys (fewer
// when fewer fit), the same on every rank (rank 0 searches). Throws AgreedError when nothing fits.
std::vector<LayoutCandidate> layout_candidates(const RunConfig& cfg, const FitConstraints& fixed, int k);

}  // namespace dit
