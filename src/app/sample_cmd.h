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
  // The sampler settings the command line gave, as sample.* assignments ("sample.num_steps=5")
  // applied through RunConfig::set over the run's [sample] (with --weights: the defaults), then
  // validated once (RunConfig::validate_sample). --per-class, --classes and --seed are always
  // among them (their defaults when not given); the others only when given.
  struct Setting {
    std::string flag;        // "--steps 5", for messages
    std::string assignment;  // "sample.num_steps=5"
  };
  std::vector<Setting> settings;
  int batch = 1000;                 // images sampled at once (split over the data-parallel replicas)
  std::string out = "samples.png";  // the grid; raw samples go to the same name with .h5
  bool overwrite = false;           // --out may replace a PNG dit_mp did not write (a grid of dit_mp's always)
  // A latent model's VAE (safetensors; its config.json beside it or vae_config): the grid shows the
  // decoded pictures, the raw samples stay latents.
  std::string vae, vae_config;
  int tp = 1, pp = 1;
  std::string backend = "cpu";
  std::string precision = "fp32";
};

// What sampling draws before writing it: the resolved settings' per_class images of each of their
// classes from the weights at opt's layout, on every rank.
struct SampledImages {
  DiTConfig model;
  SampleSection sample;        // the settings it was drawn with
  std::vector<float> samples;  // (n, C, H, W) in the model's range
  std::vector<int> labels;     // (n,)
};
SampledImages sample_from_weights(const SampleOptions& opt);
// The checks sample_from_weights makes before it allocates (the weights, the settings, the outputs,
// the backend, and that the sampling fits this machine's memory), for a command that has work to
// do before it samples. Returns the resolved sampler settings.
SampleSection check_sample_request(const SampleOptions& opt);

int run_sample(const SampleOptions& opt);
// opt with the run's data.vae (and its data.vae_config unless --vae-config is given) when it names a
// run and no --vae.
SampleOptions with_run_vae(SampleOptions opt);

// The flags `sample` and `evaluate` share (sampler settings, classes, layout, backend), with
// --per-class defaulting to `per_class`; returns what, after parsing, lists the sampler settings
// as sample.* assignments (SampleOptions::settings).
std::function<std::vector<SampleOptions::Setting>()> add_sampler_options(CLI::App* cmd, SampleOptions& o,
                                                                         int per_class);

std::function<int()> add_sample_command(CLI::App& app);

}  // namespace dit
