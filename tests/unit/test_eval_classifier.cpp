// The evaluation classifier: that it learns a procedural 10-class dataset (its convolution
// gradients are checked in test_eval_conv), batch independence, the same weights at any thread
// count, and its HDF5 file (round trip, and a damaged file refused).
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "eval/classifier.h"
#include "io/dataset.h"

namespace dit::eval {
namespace {

// Images [first, first + n) of one procedural dataset (its seed fixes the class patterns).
ImageSet synthetic(std::int64_t first, std::int64_t n) {
  const SyntheticDataset data({1, 16, 16}, 10, first + n, 11);
  ImageSet all = load_images(data), part = all;
  part.n = n;
  part.pixels.assign(all.pixels.begin() + first * all.image_size(), all.pixels.end());
  part.labels.assign(all.labels.begin() + first, all.labels.end());
  return part;
}

// From chance to nearly perfect on held-out samples of the procedural classes in two epochs.
TEST(EvalClassifier, LearnsSyntheticClasses) {
  const ImageSet train = synthetic(0, 2000), test = synthetic(2000, 500);
  Classifier net(1, 16, 16, 10, 7);
  const double before = net.accuracy(test);
  const double after = net.train(train, test, {.epochs = 2, .batch = 50, .lr = 2e-3, .seed = 3});
  EXPECT_LT(before, 0.5);
  EXPECT_GT(after, 0.95);
  EXPECT_DOUBLE_EQ(after, net.accuracy(test));
}

// Training is one fixed sequence of float operations: 1 and 3 threads give the same classifier,
// bit for bit (its features and predictions on held-out images), so `evaluate`'s numbers do not
// depend on the machine's cores.
TEST(EvalClassifier, TrainsToTheSameBitsAtAnyThreadCount) {
  const ImageSet train = synthetic(0, 600), test = synthetic(600, 100);
  const auto trained = [&](int threads) {
    const int before = omp_get_max_threads();
    cpu_set_num_threads(threads);
    Classifier net(1, 16, 16, 10, 4);
    net.train(train, test, {.epochs = 1, .batch = 50, .lr = 2e-3, .seed = 2});
    omp_set_num_threads(before);
    return net.classify(test);
  };
  const Classified one = trained(1), three = trained(3);
  EXPECT_EQ(one.predicted, three.predicted);
  ASSERT_EQ(one.features.data.size(), three.features.data.size());
  EXPECT_EQ(one.features.data, three.features.data);
  bool nonzero = false;
  for (float f : one.features.data) nonzero = nonzero || f != 0.f;
  EXPECT_TRUE(nonzero);
}

TEST(EvalClassifier, FeaturesAreThePenultimateLayerAndOrderFree) {
  const ImageSet set = synthetic(0, 40);
  const Classifier net(1, 16, 16, 10, 5);
  const Classified all = net.classify(set);
  ASSERT_EQ(all.features.n, 40);
  ASSERT_EQ(all.features.f, Classifier::kFeatureDim);
  // The same image alone gives the same features and class as inside a batch.
  ImageSet one = set;
  one.n = 1;
  one.pixels.assign(set.pixels.begin() + 17 * set.image_size(), set.pixels.begin() + 18 * set.image_size());
  one.labels = {set.labels[17]};
  const Classified single = net.classify(one);
  EXPECT_EQ(single.predicted[0], all.predicted[17]);
  for (int j = 0; j < Classifier::kFeatureDim; ++j)
    EXPECT_NEAR(single.features.data[j], all.features.row(17)[j], 1e-5 * (1 + std::abs(single.features.data[j])));
}

TEST(EvalClassifier, FileRoundTripAndDamage) {
  const ImageSet train = synthetic(0, 300), test = synthetic(300, 100);
  Classifier net(1, 16, 16, 10, 9);
  net.train(train, test, {.epochs = 1, .batch = 50, .lr = 2e-3, .seed = 1});
  const auto dir = std::filesystem::temp_directory_path() / "dit_eval_classifier_test";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "c.h5").string();
  net.save(path, "synthetic");
  const Classifier back = Classifier::load(path);
  EXPECT_EQ(back.test_accuracy(), net.test_accuracy());
  EXPECT_EQ(back.trained_on(), "synthetic");
  const Classified a = net.classify(test), b = back.classify(test);
  EXPECT_EQ(a.predicted, b.predicted);
  EXPECT_EQ(a.features.data, b.features.data);
  // One flipped byte in the middle of the file: refused with the file's name.
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(0, std::ios::end);
    const auto size = std::int64_t(f.tellg());
    f.seekp(size / 2);
    char c = 0;
    f.seekg(size / 2);
    f.read(&c, 1);
    c ^= 0x10;
    f.seekp(size / 2);
    f.write(&c, 1);
  }
  try {
    Classifier::load(path);
    FAIL() << "a damaged classifier file loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dit::eval
