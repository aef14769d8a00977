// The quality judge: classifier features of samples and of real images against a reference set (see quality.h).
#include "eval/quality.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "core/error.h"
#include "core/quote.h"
#include "eval/inception.h"
#include "eval/fid.h"
#include "io/h5_dataset.h"
#include "io/prepare.h"
#include "io/sample_file.h"

namespace dit {

namespace fs = std::filesystem;

namespace {

std::string beside(const std::string& data, const std::string& suffix) {
  fs::path p(data);
  return (p.parent_path() / (p.stem().string() + suffix)).string();
}

// Rows `rows` of `set`, in that order.
eval::ImageSet pick(const eval::ImageSet& set, const std::vector<std::int64_t>& rows) {
  eval::ImageSet out;
  out.n = std::int64_t(rows.size());
  out.c = set.c, out.h = set.h, out.w = set.w;
  out.pixels.resize(out.n * set.image_size());
  for (std::int64_t i = 0; i < out.n; ++i) {
    std::copy_n(set.pixels.begin() + rows[i] * set.image_size(), set.image_size(),
                out.pixels.begin() + i * set.image_size());
    out.labels.push_back(set.labels[rows[i]]);
  }
  return out;
}

std::vector<std::int64_t> permutation(std::int64_t n, std::uint64_t seed) {
  std::vector<std::int64_t> p(n);
  for (std::int64_t i = 0; i < n; ++i) p[i] = i;
  std::mt19937_64 gen(seed);
  for (std::int64_t i = n - 1; i > 0; --i) std::swap(p[i], p[gen() % std::uint64_t(i + 1)]);
  return p;
}

eval::ImageSet load_pixels(const std::string& path, const char* role) {
  verify_dataset_seal(path);
  const H5Dataset data(path);
  DIT_CHECK(data.kind() == "images", path, ": the ", role, " holds ", data.kind(),
            ", expected images (the classifier's feature space is for pixels; latent runs need Inception "
            "features of decoded images)");
  return eval::load_images(data);
}

}  // namespace

EvalPaths eval_paths(const RunConfig& cfg) {
  EvalPaths p;
  p.train_data = cfg.data.path;
  p.reference = cfg.eval.reference.empty() ? beside(cfg.data.path, "_test.h5") : cfg.eval.reference;
  p.classifier = cfg.eval.classifier.empty() ? beside(cfg.data.path, "_classifier.h5") : cfg.eval.classifier;
  return p;
}

void check_evaluation_inputs(const EvalPaths& paths, const std::string& prepare) {
  if (fs::exists(paths.classifier)) eval::Classifier::load(paths.classifier);
  if (fs::exists(paths.reference)) {
    verify_dataset_seal(paths.reference);
    const std::string kind = H5Dataset(paths.reference).kind();
    DIT_CHECK(kind == "images", paths.reference, ": the reference set holds ", kind, ", expected images");
    return;
  }
  DIT_CHECK(prepare == "fashion-mnist", "the reference set ", paths.reference,
            " does not exist: give a labelled image dataset (dit_mp prepare-data) with --reference or eval.reference");
}

void prepare_evaluation(const EvalPaths& paths, const std::string& prepare, const eval::ClassifierTraining& how,
                        ClassifierFile classifier) {
  if (!fs::exists(paths.train_data) && prepare == "fashion-mnist") {
    std::printf("preparing Fashion-MNIST (train) into %s\n", paths.train_data.c_str());
    if (fs::path(paths.train_data).has_parent_path()) fs::create_directories(fs::path(paths.train_data).parent_path());
    prepare_fashion_mnist(kFashionMnistDir, paths.train_data, "train");
  }
  if (!fs::exists(paths.reference)) {
    DIT_CHECK(prepare == "fashion-mnist", "the reference set ", paths.reference,
              " does not exist: give a labelled image dataset (dit_mp prepare-data) with --reference or eval.reference");
    std::printf("preparing Fashion-MNIST (test) into %s\n", paths.reference.c_str());
    prepare_fashion_mnist(kFashionMnistDir, paths.reference, "test");
  }
  if (fs::exists(paths.classifier) && classifier == ClassifierFile::KeepExisting) return;
  DIT_CHECK(fs::exists(paths.train_data), "cannot train the classifier: ", paths.train_data, " does not exist");
  std::printf("training the evaluation classifier on %s (once; saved to %s)\n", paths.train_data.c_str(),
              paths.classifier.c_str());
  std::fflush(stdout);
  const eval::ImageSet train = load_pixels(paths.train_data, "training set");
  const eval::ImageSet test = load_pixels(paths.reference, "reference set");
  const H5Dataset meta(paths.train_data);  // sealed: load_pixels verified it
  eval::Classifier net(train.c, train.h, train.w, meta.num_classes(), 0);
  const double acc = net.train(train, test, how);
  net.save(paths.classifier, paths.train_data);
  std::printf("classifier test accuracy %.2f%% on %s\n", 100 * acc, paths.reference.c_str());
}

struct QualityJudge::State {
  EvalPaths paths;
  std::unique_ptr<eval::Classifier> net;
  eval::ImageSet train;  // the floor's real images
  eval::Features reference;
  eval::Gaussian reference_gaussian;
  std::vector<std::int64_t> reference_order;  // a fixed shuffle: the precision/recall subset
  std::vector<std::vector<std::int64_t>> train_by_class;  // training rows per class, a fixed shuffle
};

QualityJudge::QualityJudge(const EvalPaths& paths) : s_(std::make_unique<State>()) {
  s_->paths = paths;
  s_->net = std::make_unique<eval::Classifier>(eval::Classifier::load(paths.classifier));
  s_->train = load_pixels(paths.train_data, "training set");
  const eval::ImageSet ref = load_pixels(paths.reference, "reference set");
  DIT_CHECK(ref.c == s_->net->channels() && ref.h == s_->net->height() && ref.w == s_->net->width(),
            paths.reference, ": images of ", ref.c, "x", ref.h, "x", ref.w, " but ", paths.classifier, " takes ",
            s_->net->channels(), "x", s_->net->height(), "x", s_->net->width());
  std::vector<std::int64_t> per_class(static_cast<std::size_t>(s_->net->num_classes()), 0);
  for (int label : ref.labels) {
    DIT_CHECK(label >= 0 && label < s_->net->num_classes(), paths.reference, ": a label ", label,
              " outside the classifier's ", s_->net->num_classes(), " classes (", paths.classifier, ")");
    ++per_class[static_cast<std::size_t>(label)];
  }
  for (std::size_t c = 0; c < per_class.size(); ++c)
    DIT_CHECK(per_class[c] > 0, paths.reference, " has no image of class ", c, " of the classifier's ",
              per_class.size(), " (", paths.classifier, "): the reference must hold every class");
  s_->reference = s_->net->classify(ref).features;
  s_->reference_gaussian = eval::fit_gaussian(s_->reference);
  s_->reference_order = permutation(s_->reference.n, 1);
  s_->train_by_class.resize(s_->net->num_classes());
  for (std::int64_t i : permutation(s_->train.n, 2))
    if (s_->train.labels[i] >= 0 && s_->train.labels[i] < s_->net->num_classes())
      s_->train_by_class[s_->train.labels[i]].push_back(i);
}

QualityJudge::~QualityJudge() = default;

QualityReport QualityJudge::judge(const eval::ImageSet& samples) const {
  const eval::Classifier& net = *s_->net;
  DIT_CHECK(samples.n >= eval::kMinEvalSamples, "evaluation needs at least ", eval::kMinEvalSamples,
            " samples (precision and recall use each sample's ", eval::kNearestNeighbour,
            "rd nearest neighbour), got ", samples.n);
  DIT_CHECK(samples.c == net.channels() && samples.h == net.height() && samples.w == net.width(), "samples of ",
            samples.c, "x", samples.h, "x", samples.w, " but the classifier ", s_->paths.classifier, " takes ",
            net.channels(), "x", net.height(), "x", net.width());
  for (int label : samples.labels) {
    DIT_CHECK(label >= 0 && label < net.num_classes(), "a sample's label ", label, " is outside the classifier's ",
              net.num_classes(), " classes");
    DIT_CHECK(!s_->train_by_class[label].empty(), "samples of class ", label, " but ", s_->paths.train_data,
              " (the real-data floor) has no image of that class");
  }
  const auto [lo, hi] = std::minmax_element(samples.pixels.begin(), samples.pixels.end());
  const bool finite = std::all_of(samples.pixels.begin(), samples.pixels.end(), [](float v) { return std::isfinite(v); });
  char range_text[64] = "none";
  if (!samples.pixels.empty()) std::snprintf(range_text, sizeof range_text, "[%g, %g]", *lo, *hi);
  const std::string range = range_text;
  DIT_CHECK(finite, "the samples hold NaN or Inf values (range ", range, "): nothing to measure");
  // Precision/recall compare equal-size sets: the reference's first n rows of a fixed shuffle.
  const std::int64_t k = std::min(samples.n, s_->reference.n);
  eval::Features ref_subset{k, s_->reference.f, {}};
  for (std::int64_t i = 0; i < k; ++i)
    ref_subset.data.insert(ref_subset.data.end(), s_->reference.row(s_->reference_order[i]),
                           s_->reference.row(s_->reference_order[i]) + s_->reference.f);
  auto measure = [&](const eval::ImageSet& set) {
    const eval::Classified c = net.classify(set);
    SetQuality q;
    q.n = set.n;
    q.fid = eval::frechet_distance(eval::fit_gaussian(c.features), s_->reference_gaussian);
    const eval::PrecisionRecall pr = eval::precision_recall(ref_subset, c.features);
    q.precision = pr.precision;
    q.recall = pr.recall;
    std::int64_t right = 0;
    for (std::int64_t i = 0; i < set.n; ++i) right += c.predicted[i] == set.labels[i];
    q.class_accuracy = double(right) / double(set.n);
    return q;
  };
  QualityReport r;
  r.samples = measure(samples);
  DIT_CHECK(std::isfinite(r.samples.fid) && std::isfinite(r.samples.precision) && std::isfinite(r.samples.recall),
            "the quality of the samples is not finite (FID ", r.samples.fid, "): their values range over ", range,
            ", far outside the model's [-1, 1]");
  // The floor: for each sample, a real training image of its class (a fixed shuffle, no repeats
  // while the class has images left).
  const auto& by_class = s_->train_by_class;
  std::vector<std::size_t> used(net.num_classes(), 0);
  std::vector<std::int64_t> rows;
  for (int label : samples.labels) {
    const auto& pool = by_class[label];
    DIT_CHECK(!pool.empty(), s_->paths.train_data, " has no image of class ", label, " for the real-data floor");
    rows.push_back(pool[used[label]++ % pool.size()]);
  }
  r.floor = measure(pick(s_->train, rows));
  r.reference_n = s_->reference.n;
  r.reference = s_->paths.reference;
  r.classifier = s_->paths.classifier;
  r.classifier_test_accuracy = net.test_accuracy();
  return r;
}

std::string quality_table(const QualityReport& r) {
  char buf[1024];
  std::snprintf(buf, sizeof buf,
                "sample quality in the classifier's feature space (%d-d; %s, test accuracy %.1f%%)\n"
                "against %s (%lld images):\n"
                "                      n      FID   precision   recall   class accuracy\n"
                "  samples       %7lld %8.2f %11.3f %8.3f %15.1f%%\n"
                "  real (floor)  %7lld %8.2f %11.3f %8.3f %15.1f%%\n"
                "  FID / floor: %.1fx\n",
                eval::Classifier::kFeatureDim, r.classifier.c_str(), 100 * r.classifier_test_accuracy,
                r.reference.c_str(), static_cast<long long>(r.reference_n), static_cast<long long>(r.samples.n),
                r.samples.fid, r.samples.precision, r.samples.recall, 100 * r.samples.class_accuracy,
                static_cast<long long>(r.floor.n), r.floor.fid, r.floor.precision, r.floor.recall,
                100 * r.floor.class_accuracy, r.samples.fid / std::max(r.floor.fid, 1e-12));
  return buf;
}

std::string quality_json(const QualityReport& r) {
  auto set = [](const SetQuality& q) {
    char b[256];
    std::snprintf(b, sizeof b, "{\"n\": %lld, \"fid\": %.6g, \"precision\": %.6g, \"recall\": %.6g, "
                               "\"class_accuracy\": %.6g}",
                  static_cast<long long>(q.n), q.fid, q.precision, q.recall, q.class_accuracy);
    return std::string(b);
  };
  std::ostringstream os;
  os << "{\"samples\": " << set(r.samples) << ", \"floor\": " << set(r.floor)
     << ", \"fid_over_floor\": " << r.samples.fid / std::max(r.floor.fid, 1e-12) << ", \"reference\": "
     << quote_string(r.reference) << ", \"reference_n\": " << r.reference_n << ", \"classifier\": " << quote_string(r.classifier)
     << ", \"classifier_test_accuracy\": " << r.classifier_test_accuracy << "}";
  return os.str();
}

}  // namespace dit
