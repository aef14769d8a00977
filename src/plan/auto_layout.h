// `parallel.layout = "auto"` (`train --layout auto`): the layout search of `plan --fit`
// (fit_search) run for this job's world size, model, global batch and memory per rank, its choice
// written into the run's config, and the messages when nothing fits or no layout divides the job.
// The search is deterministic: every rank that runs it on the same inputs reaches the same row.
#pragma once

#include <string>

#include "io/config.h"
#include "plan/planner.h"

namespace dit {

struct AutoLayoutRequest {
  RunConfig cfg;              // validated; the model, global batch, precision and recipe are fixed
  FitConstraints fixed;       // the settings the command line gave (they constrain the search)
  int world = 1;              // ranks of the job
  int ranks_per_node = 1;     // ranks sharing one machine's host memory (the CPU backend)
  double device_free_bytes = 0;  // CUDA: the least free device memory of the ranks at start; 0 = unknown
};

// The hardware (links and FLOP/s of the time model) and the memory per rank the search plans for:
// parallel.memory_gib, else parallel.hardware's memory, else (CUDA) the device's free memory, else
// the host memory limit (cgroup or machine) shared by the ranks of a machine. `source` says which.
FitRequest auto_fit_request(const AutoLayoutRequest& r, std::string* source);

struct AutoLayoutChoice {
  FitRequest req;
  FitSearch search;    // search.rows[0] is the choice
  std::string source;  // where the memory per rank came from
};
// Runs the search. Throws naming what would fit when no layout divides the world size (the world
// sizes that some layout divides) or none fits the memory (the smallest peak found and the memory
// given).
AutoLayoutChoice choose_layout(const AutoLayoutRequest& r);

// Sets the chosen tp, pp, micro-batch, recomputation, sequence parallelism, schedule and virtual
// stages of `p` in `cfg` (balanced stages; full recomputation of every block).
void apply_layout(RunConfig& cfg, const LayoutPlan& p);
// Whether `recorded` (a run folder's config.toml) holds a layout the job can continue on: within
// the constraints, dividing the world size and planned within the memory. `why` says why not.
bool recorded_layout_fits(const RunConfig& recorded, const AutoLayoutRequest& r, std::string* why);

// The chosen row and two runners-up, for the log.
std::string format_choice(const AutoLayoutChoice& c);

}  // namespace dit
