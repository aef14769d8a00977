// Datasets of images (or latents) with class labels, read one sample at a time by index.
// Samples come out as float32 in the model's range ([-1, 1] for images, scaled latents).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace dit {

struct SampleShape {
  int channels = 1, height = 32, width = 32;
  std::int64_t numel() const { return std::int64_t(channels) * height * width; }
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual std::int64_t size() const = 0;
  virtual SampleShape shape() const = 0;
  virtual int num_classes() const = 0;
  // Writes sample `index` (shape().numel() floats) and returns its label.
  virtual int get(std::int64_t index, float* out) const = 0;
  virtual std::string describe() const = 0;
  // Whether the samples are VAE latents (else images in [-1, 1]).
  virtual bool latents() const { return false; }
};

// A procedural dataset for tests and smoke runs: class k draws a fixed random pattern of its own
// (from the seed) plus a little per-sample noise, so a model can learn it in a few hundred steps.
class SyntheticDataset final : public Dataset {
 public:
  SyntheticDataset(SampleShape shape, int num_classes, std::int64_t size, std::uint64_t seed);
  std::int64_t size() const override { return size_; }
  SampleShape shape() const override { return shape_; }
  int num_classes() const override { return classes_; }
  int get(std::int64_t index, float* out) const override;
  std::string describe() const override;

 private:
  SampleShape shape_;
  int classes_;
  std::int64_t size_;
  std::uint64_t seed_;
};

}  // namespace dit
