// What a run watches while it trains. At every logged step each rank's time since the last log is
// split into compute, exposed tp / pp / dp communication, the pipeline bubble, data wait, the
// optimizer and checkpoint saving, and its memory is read (host RSS now and at peak, the device's in
// use, and the bytes the plan gave the rank); rank 0 gathers the ranks' rows and writes them to
// <run>/ranks.jsonl and TensorBoard. From the same rows a rank whose own work stays above the
// median rank's by train.straggler_margin is named (a straggler, with its host). (A loss spike is the
// Trainer's to find, before its update: engine/loss_spike.h.)
//
// The bubble: the time a rank waits on its pipeline (receives, sends in flight, the step's end) is
// split by the schedule simulator (parallel/schedule_sim.h) run on the tables with the ranks' own
// measured op times (T_F, T_B, T_W of each stage): the idle time it gives a stage is that rank's
// bubble, what the rank waited beyond it is exposed pp communication. At pp 1 there is no bubble and
// the wait for the other ranks at the step's end is the dp group's.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "engine/train_setup.h"
#include "engine/trainer.h"
#include "parallel/grid.h"
#include "run/log.h"
#include "run/tensorboard.h"

namespace dit {

// One rank's step split, seconds per step averaged over the steps since the last log.
struct RankTimes {
  double step = 0, compute = 0, tp = 0, pp = 0, bubble = 0, dp = 0, data = 0, optimizer = 0, checkpoint = 0;
};

// The bubble and exposed pp time of each stage of one pipeline from its stages' mean op times
// (f, b, w: seconds of a forward, a backward or its input half, a weight half) and the time each
// waited (idle): the simulator's idle time of the stage, at most what it waited, and the rest.
struct StageWait {
  double bubble = 0, exposed = 0;
};
std::vector<StageWait> split_pipeline_wait(const TrainConfig& train, int pp, int microbatches,
                                           const std::vector<double>& f, const std::vector<double>& b,
                                           const std::vector<double>& w, const std::vector<double>& idle);

class RunMonitor {
 public:
  // Collective over ctx.world (the ranks' hosts are gathered once). `planned_bytes`: the bytes the
  // plan gave this rank's stage (or the Trainer's own account where there is no plan).
  // `ranks_path`: rank 0's ranks.jsonl ("" elsewhere).
  RunMonitor(ParallelContext& ctx, const TrainSetup& setup, double planned_bytes, const std::string& ranks_path,
             double straggler_margin);

  // Every rank, every step: the step's split.
  void add_step(const StepStats& st);
  // Every rank: seconds spent saving a checkpoint since the last step.
  void add_checkpoint(double seconds) { checkpoint_s_ += seconds; }
  // Collective over ctx.world at a logged step: gathers the rows, and on rank 0 writes them to
  // ranks.jsonl and `tb` (when given). Returns rank 0's lines to print (a straggler), none elsewhere.
  std::vector<std::string> log(std::int64_t step, const Backend& be, TensorBoardWriter* tb);
  // Rank 0, after the last log: the mean split of every rank over the run's logged windows.
  const std::vector<RankTimes>& last_times() const { return last_; }

 private:
  ParallelContext* ctx_;
  TrainSetup setup_;
  double planned_bytes_;
  std::unique_ptr<MetricsWriter> rows_;
  double straggler_margin_;
  std::vector<std::string> hosts_;  // rank 0: every rank's host
  // This rank's sums since the last log.
  StepSplit split_{};
  double step_s_ = 0, checkpoint_s_ = 0, op_f_ = 0, op_b_ = 0, op_w_ = 0;
  std::int64_t steps_ = 0;
  double device_peak_ = 0;  // the most device memory in use seen at a log
  // Rank 0: logs in a row each rank's own work stayed above the median by the margin; the rank named.
  std::vector<int> slow_logs_;
  int named_ = -1;
  std::vector<RankTimes> last_;
};

}  // namespace dit
