// The plots at the end of a training run: tools/plot_run.py (matplotlib) turns the run's
// metrics.jsonl into loss.png and throughput.png beside it, when Python with matplotlib is there.
// DIT_PLOTS=0 turns it off (the test suites, which train many tiny runs).
#pragma once

#include <string>

namespace dit {

// Runs the plot script on `run_dir` (rank 0 only, after training); returns one line saying what
// was written, or why nothing was.
std::string write_run_plots(const std::string& run_dir);

}  // namespace dit
