// `dit_mp evaluate`: FID, precision/recall and class accuracy of samples (drawn from weights at any
// layout, or read from a samples file) in a classifier's feature space against a labelled
// reference set, beside the real-data floor (eval/quality.h); or FID in Inception-V3 features
// against published reference statistics.
#pragma once

#include <functional>
#include <string>

#include <CLI/CLI.hpp>

#include "app/sample_cmd.h"
#include "eval/classifier.h"

namespace dit {

struct EvaluateOptions {
  SampleOptions sample;      // --run / --weights and the sampler settings (per_class 100 here)
  std::string samples_file;  // or --samples: a samples HDF5 (`dit_mp sample` writes one)
  std::string config;        // a TOML config naming data.path and [eval] (default: the run's, or the demo's)
  std::string reference, classifier, train_data;  // override the config's
  bool train_classifier = false;  // (re)train the classifier first, even if its file exists
  int classifier_epochs = eval::ClassifierTraining{}.epochs;
  std::string json;          // where to write the result (default: <run>/eval.json, or none)
  std::string samples_out;   // also write the drawn samples here (HDF5)
  // ImageNet-scale runs: FID in Inception-V3 pool features (tools/convert_inception.py makes the
  // weights file) against published reference statistics (a .npz of mu and sigma).
  std::string inception, reference_stats;
};

int run_evaluate(const EvaluateOptions& opt);

std::function<int()> add_evaluate_command(CLI::App& app);

}  // namespace dit
