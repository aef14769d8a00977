// Sample quality you can measure, for `dit_mp evaluate` and training's `train.eval_every`. Samples
// (drawn from weights at any layout, or read from a samples file) are compared with a labelled
// reference set in the feature space of a classifier (eval/classifier.h): FID, k-NN precision and
// recall, and class accuracy (how often the classifier names the class a sample was conditioned
// on). The same numbers for as many real training images give the floor those values are read
// against: FID of real data against real data is not 0 at a finite sample size.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

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
// Whether an existing classifier file is kept or trained again (replaced only once the new one is
// saved: a failure leaves the old file as it was).
enum class ClassifierFile { KeepExisting, Retrain };
void prepare_evaluation(const EvalPaths& paths, const std::string& prepare, const eval::ClassifierTraining& how = {},
                        ClassifierFile classifier = ClassifierFile::KeepExisting);

// The cheap part of prepare_evaluation, for a run to refuse bad [eval] inputs before it starts:
// a missing reference set that `prepare` cannot make, a reference that holds no images, or a
// classifier file that does not load. Nothing is written.
void check_evaluation_inputs(const EvalPaths& paths, const std::string& prepare);

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

}  // namespace dit
