// `parallel.layout = "tune"` (`train --layout tune`): the layout measured, not only predicted. The
// planner's search gives its parallel.tune_candidates fastest layouts by the time model (tp, pp, the
// micro-batch, recomputation, sequence parallelism, the schedule and its virtual stages); inside the
// same job each is built and trained for parallel.tune_steps steps from the run's own start (nothing
// is written, and the trials' state is dropped: the run then starts as it would have), its steps after
// the first timed, the slowest rank's mean counting; the run trains on the fastest. Every trial is
// recorded (predicted against measured step time and memory) in <run.dir>/tune.json, the log and
// TensorBoard's `tune` text. A resumed run continues on the layout its folder records, untried.
#pragma once

#include <string>
#include <vector>

#include "io/config.h"
#include "plan/planner.h"

namespace dit {

struct TuneTrial {
  RunConfig cfg;                       // the candidate's settings
  std::string layout;                  // "tp 2 pp 2 dp 2, micro-batch 4, recompute none, 1f1b"
  double predicted_s = 0, measured_s = 0;          // a step
  double predicted_bytes = 0, measured_bytes = 0;  // per rank: the plan's peak; the trial's largest account
  double peak_rss = 0;   // the largest rank's peak resident memory during the trial (0: unknown)
};

struct TuneResult {
  RunConfig chosen;
  std::vector<TuneTrial> trials;  // in the time model's order
  int best = 0;                   // the trial trained on
  std::string table;              // for the log (rank 0)
  std::string json;               // tune.json
};

// Collective: the trials and the choice. `cfg` holds a layout the search chose (resolve_auto_layout)
// and its data ready; `fixed` the settings the command line gave.
TuneResult tune_layout(const RunConfig& cfg, const FitConstraints& fixed);

}  // namespace dit
