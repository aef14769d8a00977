// The `train` and `sample` subcommands: everything a run does around the training step (run
// folder, data preparation, logging, metrics, sample grids, weights), on every rank.
#pragma once

#include <string>
#include <vector>

#include "io/config.h"

namespace dit {

struct TrainConfig;
// The Trainer's settings from a run configuration.
TrainConfig train_config(const RunConfig& c);

// DryRun checks the inputs and prints the layout and the rank map (node, cores or GPU, tp/pp/dp
// of every rank), then stops: nothing is written, the run folder is not touched.
enum class TrainMode { Train, DryRun };

// Trains as `cfg` says at tp x pp x (world / tp / pp). Returns the exit code: 0, 1 on an error,
// kExitPreempted (75, app/signals.h) when stopped by a signal after a checkpoint.
int run_train(const RunConfig& cfg, TrainMode mode = TrainMode::Train);

struct SampleOptions {
  std::string run_dir;     // a training run folder (config.toml + ema.h5), or
  std::string weights;     // a weights/golden HDF5 file with /config and /weights
  std::vector<int> classes;  // empty: every class
  int per_class = 8;
  int batch = 1000;        // images sampled at once (split over the data-parallel replicas)
  int steps = 50;
  std::string sampler = "ddim";
  double cfg_scale = 4.0;
  bool cfg_official = false;
  double cfg_t_min = 0.0, cfg_t_max = 1.0;  // guidance only at these noise levels (app/sampler.h)
  std::uint64_t seed = 0;
  // Which of the settings above the command line gave: with run_dir, the others are the run's
  // [sample] (how the run was configured to be sampled).
  struct Given {
    bool steps = false, sampler = false, cfg_scale = false, cfg_official = false, cfg_t_min = false,
         cfg_t_max = false;
  } given;
  std::string out = "samples.png";  // the grid; raw samples go to the same name with .h5
  int tp = 1, pp = 1;
  std::string backend = "cpu";
  std::string precision = "fp32";
};

int run_sample(const SampleOptions& opt);

// What run_sample draws before writing it: opt.per_class images of each of opt.classes (all
// when empty) from the weights at opt's layout, on every rank.
struct SampledImages {
  DiTConfig model;
  std::vector<float> samples;  // (n, C, H, W) in the model's range
  std::vector<int> labels;     // (n,)
};
SampledImages sample_from_weights(const SampleOptions& opt);

}  // namespace dit
