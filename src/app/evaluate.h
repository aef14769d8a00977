// Sample quality you can measure: `dit_mp evaluate` and training's `train.eval_every`. Samples
// (drawn from weights at any layout, or read from a samples file) are compared with a labelled
// reference set in the feature space of a classifier (eval/classifier.h): FID, k-NN precision and
// recall, and class accuracy (how often the classifier names the class a sample was conditioned
// on). The same numbers for as many real training images give the floor those values are read
// against: FID of real data against real data is not 0 at a finite sample size.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "app/run_cmds.h"
#include "eval/classifier.h"
#include "io/config.h"

namespace dit {

// The files an evaluation reads: training data (the floor's real images, the classifier's
// training set), the reference set (e.g. a test split) and the classifier.
struct EvalPaths {
  std::string train_data, reference, classifier;
};
// From a run configuration: data.path and [eval], whose empty entries default to
// <data.path without .h5>_test.h5 and <data.path without .h5>_classifier.h5.
EvalPaths eval_paths(const RunConfig& cfg);

// Rank 0's work before judging: prepares a missing Fashion-MNIST test split when `prepare` is
// "fashion-mnist", and trains and saves the classifier when its file is missing (a few minutes
// once; each epoch prints a line). Throws one line naming a missing or unusable file.
void prepare_evaluation(const EvalPaths& paths, const std::string& prepare,
                        const eval::ClassifierTraining& how = {});

struct SetQuality {
  std::int64_t n = 0;
  double fid = 0, precision = 0, recall = 0, class_accuracy = 0;
};
struct QualityReport {
  SetQuality samples;  // the generated images
  SetQuality floor;    // as many real training images, same classes, against the same reference
  std::int64_t reference_n = 0;
  std::string reference, classifier;
  double classifier_test_accuracy = 0;
};

// Holds the classifier and the reference set's features (rank 0 only: judging is host work).
class QualityJudge {
 public:
  explicit QualityJudge(const EvalPaths& paths);
  ~QualityJudge();
  // Samples in the model's range [-1, 1] with the labels they were conditioned on.
  QualityReport judge(const eval::ImageSet& samples) const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

// One printed table, and a JSON object (no trailing newline).
std::string quality_table(const QualityReport& r);
std::string quality_json(const QualityReport& r);

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

}  // namespace dit
