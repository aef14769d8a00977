// A training run's life on every rank: its folder (config.toml, metrics.jsonl, checkpoints, sample
// grids, model.h5/ema.h5, accounting.json, plots), its start (fresh, --resume or --init-from), the
// training loop, and what is due between steps (checkpoint, sample grid, evaluation, a stop
// signal). What the Trainer computes lives in engine/; this is everything around it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/train_setup.h"
#include "engine/trainer.h"
#include "eval/quality.h"
#include "io/config.h"
#include "io/dataset.h"
#include "io/vae_weights.h"
#include "run/log.h"
#include "run/monitor.h"
#include "run/profile.h"
#include "run/tensorboard.h"

namespace dit {

class Run {
 public:
  // Collective. Opens the dataset and checks it against the model, builds the backend, the rank
  // grid and the Trainer, starts from a checkpoint or weights when run.resume / run.init_from say
  // so, and only then creates the run folder (rank 0; clearing it under run.overwrite). `setup`
  // comes from TrainSetup::make for this job's layout; `planned` holds the plan of each pipeline
  // stage (`dit_mp plan`), which the first step is checked against (empty: no check).
  Run(const RunConfig& cfg, const TrainSetup& setup, std::vector<MemoryAccount> planned = {});
  ~Run();

  // Trains to train.steps. Returns the exit code: 0; 1 when the loss diverged; kExitPreempted
  // (run/signals.h) when a stop signal arrived, after a checkpoint.
  int train();
  // Rank 0 writes a layout tuning's record (run/layout_tune.h) into the run folder (tune.json) and
  // TensorBoard (text `tune`).
  void record_tune(const std::string& json, const std::string& table);

 private:
  void open_data();
  void build_engine();
  void start();
  void make_folder();
  void print_header();
  void log_step(std::int64_t done, const StepStats& st);
  void write_metrics(const std::function<void()>& write);
  // A profile's step: `write` (collective) returns rank 0's line naming the trace it wrote, or "".
  void write_profile(const std::function<std::string()>& write);
  int stop_for_divergence(std::int64_t done, const StepStats& st) const;
  std::int64_t nonfinite_count(const StepStats& st) const;
  int stop_for_signal(int sig, std::int64_t done, bool saved);
  int finish(const StepStats& last, std::int64_t steps_run);
  void checkpoint();
  // The EMA's samples of `classes` (all when empty), on every rank; `what` names the setting
  // that sized them in an out-of-memory message.
  std::pair<std::vector<float>, std::vector<int>> draw_ema(const std::vector<int>& classes, int per_class,
                                                           int num_steps, const std::string& what);
  std::string sample_grid(const std::string& name, std::int64_t step);  // returns what it wrote
  void evaluate(std::int64_t step);
  std::string checkpoint_root() const;
  std::string file(const std::string& name) const;

  RunConfig cfg_;
  TrainSetup setup_;
  std::vector<MemoryAccount> planned_;
  std::unique_ptr<Dataset> data_;
  std::optional<VaeFile> vae_;  // data.vae: the grids are decoded (over every rank)
  std::unique_ptr<Backend> be_;
  ParallelContext ctx_;
  std::string comms_, rank_map_;
  std::unique_ptr<Trainer> trainer_;
  std::unique_ptr<MetricsWriter> metrics_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;  // rank 0, train.tensorboard
  std::unique_ptr<RunMonitor> monitor_;            // every rank: the step split, memory, stragglers, spikes
  std::unique_ptr<Profiler> profiler_;             // train.profile
  ConsoleLog console_;
  std::unique_ptr<QualityJudge> judge_;  // rank 0, made at the first evaluation
  double t0_ = 0;                        // when training began
  double window_s_ = 0;                  // step time since the last log line
  std::int64_t window_steps_ = 0;
};

}  // namespace dit
