// `dit_mp sample`: images from trained weights (a run's ema.h5 or a weights file) at any layout,
// written as a grid PNG and the raw samples (HDF5). `evaluate` draws its samples the same way.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "io/config.h"

namespace dit {

struct SampleOptions {
  std::string run_dir;  // a training run folder (config.toml + ema.h5), or
  std::string weights;  // a weights/golden HDF5 file with /config and /weights
  // What to draw and how: classes (empty: every class), per_class, and the sampler settings. With
  // run_dir, the sampler settings the command line did not give are the run's [sample].
  SampleSection sample;
  // Which sampler settings the command line gave.
  struct Given {
    bool steps = false, sampler = false, cfg_scale = false, cfg_official = false, cfg_t_min = false,
         cfg_t_max = false;
  } given;
  int batch = 1000;                 // images sampled at once (split over the data-parallel replicas)
  std::string out = "samples.png";  // the grid; raw samples go to the same name with .h5
  int tp = 1, pp = 1;
  std::string backend = "cpu";
  std::string precision = "fp32";
};

// What sampling draws before writing it: opt.sample.per_class images of each of its classes from
// the weights at opt's layout, on every rank.
struct SampledImages {
  DiTConfig model;
  std::vector<float> samples;  // (n, C, H, W) in the model's range
  std::vector<int> labels;     // (n,)
};
SampledImages sample_from_weights(const SampleOptions& opt);
// The checks sample_from_weights makes before it allocates (the weights, the settings, the outputs,
// the backend, and that the sampling fits this machine's memory), for a command that has work to
// do before it samples.
void check_sample_request(const SampleOptions& opt);

int run_sample(const SampleOptions& opt);

// The flags `sample` and `evaluate` share (sampler settings, layout, backend); returns what
// reports, after parsing, which of the run-overridable settings the command line gave.
std::function<SampleOptions::Given()> add_sampler_options(CLI::App* cmd, SampleOptions& o);
// "0,3,7" -> {0, 3, 7}; `what` names the flag in the message.
std::vector<int> parse_ints(const std::string& s, const char* what);

std::function<int()> add_sample_command(CLI::App& app);

}  // namespace dit
