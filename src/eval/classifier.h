// A small CNN classifier for labelled image datasets in the project's HDF5 format (Fashion-MNIST
// first): `dit_mp evaluate` uses its penultimate layer as the feature space for FID and
// precision/recall, and its predictions for class accuracy. It trains on the host (a one-off of a
// few minutes) with the fixed-order GEMM (backend/cpu/ordered_gemm.h), so that one seed gives the
// same weights, bit for bit, at any thread count on any CPU, and is saved as a sealed HDF5 file
// with its measured test accuracy.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "eval/fid.h"

namespace dit {
class Dataset;
}

namespace dit::eval {

// Images held in memory: (n, c, h, w) float in the model's range [-1, 1], with labels.
struct ImageSet {
  std::int64_t n = 0;
  int c = 1, h = 0, w = 0;
  std::vector<float> pixels;
  std::vector<int> labels;
  std::int64_t image_size() const { return std::int64_t(c) * h * w; }
};
// Every sample of `data` (or the first `limit` when limit > 0). Latent datasets are refused:
// the classifier sees pixels.
ImageSet load_images(const Dataset& data, std::int64_t limit = 0);

struct ClassifierTraining {
  int epochs = 6;
  int batch = 128;
  double lr = 2e-3;   // Adam, cosine decay to 0 over the epochs
  int max_shift = 2;  // augmentation: each image moved by up to this many pixels in x and y
  std::uint64_t seed = 0;
};

// What classify() returns for a set of images.
struct Classified {
  std::vector<int> predicted;  // (n,) the most likely class
  Features features;           // (n, kFeatureDim) the penultimate layer (after its ReLU)
};

class Classifier {
 public:
  static constexpr int kFeatureDim = 128;

  // Random initial weights (He) for images of c x h x w (h, w divisible by 8) and `classes`.
  Classifier(int c, int h, int w, int classes, std::uint64_t seed);

  // Trains on `train`, printing one line per epoch with the accuracy on `test`; returns the
  // final test accuracy (also kept in test_accuracy()).
  double train(const ImageSet& train, const ImageSet& test, const ClassifierTraining& how);

  Classified classify(const ImageSet& images) const;
  double accuracy(const ImageSet& images) const;  // share of labels predicted

  // A sealed HDF5 file: /classifier attributes (shape, classes, test accuracy, source) and
  // /weights/<name> float32 tensors with checksums. Written to a temporary name, then renamed.
  void save(const std::string& path, const std::string& trained_on) const;
  // Throws one line naming the file and what is wrong (seal, shapes, non-finite weights).
  static Classifier load(const std::string& path);

  int channels() const { return c_; }
  int height() const { return h_; }
  int width() const { return w_; }
  int num_classes() const { return classes_; }
  double test_accuracy() const { return test_accuracy_; }
  const std::string& trained_on() const { return trained_on_; }

 private:
  struct Param {
    std::string name;
    std::vector<std::int64_t> shape;
    std::vector<float> value;
  };
  struct Activations;
  void forward(const float* x, int n, Activations& a) const;
  double backward(const float* x, const int* labels, int n, Activations& a,
                  std::vector<std::vector<float>>& grads) const;

  int c_, h_, w_, classes_;
  std::vector<Param> params_;  // conv1..3 (weight, bias), fc1, fc2 (weight, bias)
  double test_accuracy_ = 0;
  std::string trained_on_;
};

}  // namespace dit::eval
