// A timeline of every rank (train.profile, --profile A:B): steps A to B recorded by each rank's trace
// recorder (core/trace.h) and written by rank 0 as one Chrome-trace JSON file, <run.dir>/trace.json,
// which Perfetto (ui.perfetto.dev, offline too) and chrome://tracing open:
//
//   - a track per rank ("rank 3: tp 1 pp 1 dp 0 on node7"), its spans: each step, each pipeline action
//     (F, B and W per microbatch, ".1" for chunk 1), the waits for pipeline messages, the tp, dp and
//     world collectives, the update, data waits and checkpoint saves;
//   - a flow arrow from each pipeline message's send to its receive;
//   - clocks aligned at the start: each process has its own trace clock, and rank 0 measures every
//     other rank's offset by ping-pong (the exchange with the shortest round trip of 8), so ranks on
//     different machines line up to within half that round trip;
//   - in "otherData": the layout, the schedule, the clock offsets and hosts, and for each step of
//     each pipeline its measured bubble (1 - busy / (pp x makespan) of its actions) beside the one
//     the schedule simulator gives on the same tables with the actions' measured durations.
//
// Off by default and free when off: the recorder's probes test one flag.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/train_setup.h"
#include "io/config.h"
#include "parallel/grid.h"

namespace dit {

class Profiler {
 public:
  // `path`: where rank 0 writes the trace. Nothing is recorded unless `steps` is a range.
  Profiler(ParallelContext& ctx, const TrainSetup& setup, ProfileSteps steps, std::string path);
  // Collective, on every rank before step `step` (counting from 1) runs: the first step of the range
  // aligns the clocks and starts recording.
  void before_step(std::int64_t step);
  // Collective, on every rank after step `step` and what followed it (a checkpoint): after the last
  // step of the range, stops recording and writes the trace. Returns rank 0's line naming it, or "".
  std::string after_step(std::int64_t step);
  // Collective: a run ending inside the range (a stop signal, fewer steps) writes what it recorded.
  std::string finish();

 private:
  std::string write();
  ParallelContext* ctx_;
  TrainSetup setup_;
  ProfileSteps steps_;
  std::string path_;
  bool recording_ = false, written_ = false;
  double offset_s_ = 0;               // this rank's clock minus rank 0's
  std::vector<double> offsets_;       // rank 0: every rank's
};

}  // namespace dit
