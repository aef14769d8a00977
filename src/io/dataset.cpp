// The synthetic dataset (HDF5 datasets live in h5_dataset.cpp).
#include "io/dataset.h"

#include <cmath>

#include "core/error.h"
#include "core/philox.h"

namespace dit {

SyntheticDataset::SyntheticDataset(SampleShape shape, int num_classes, std::int64_t size,
                                   std::uint64_t seed)
    : shape_(shape), classes_(num_classes), size_(size), seed_(seed) {
  DIT_CHECK(num_classes > 0 && size > 0, "synthetic dataset needs classes > 0 and size > 0");
}

int SyntheticDataset::get(std::int64_t index, float* out) const {
  DIT_CHECK(index >= 0 && index < size_, "sample ", index, " outside [0, ", size_, ")");
  const int label = static_cast<int>(index % classes_);
  // A smooth class pattern: a few random sinusoids per class, squashed into [-1, 1].
  Philox cls(seed_, RngPurpose::Test, 1, static_cast<std::uint64_t>(label));
  float fx[3], fy[3], ph[3], amp[3];
  for (int k = 0; k < 3; ++k) {
    fx[k] = 0.5f + 2.5f * cls.uniform();
    fy[k] = 0.5f + 2.5f * cls.uniform();
    ph[k] = 6.2831853f * cls.uniform();
    amp[k] = 0.5f + 0.5f * cls.uniform();
  }
  Philox noise(seed_, RngPurpose::Test, 2, static_cast<std::uint64_t>(index));
  for (int c = 0; c < shape_.channels; ++c)
    for (int y = 0; y < shape_.height; ++y)
      for (int x = 0; x < shape_.width; ++x) {
        float v = 0;
        for (int k = 0; k < 3; ++k)
          v += amp[k] * std::sin(fx[k] * 6.2831853f * x / shape_.width +
                                 fy[k] * 6.2831853f * y / shape_.height + ph[k] + c);
        out[(c * shape_.height + y) * shape_.width + x] = std::tanh(v) + 0.05f * noise.normal();
      }
  return label;
}

std::string SyntheticDataset::describe() const {
  return "synthetic " + std::to_string(size_) + " samples of " + std::to_string(shape_.channels) +
         "x" + std::to_string(shape_.height) + "x" + std::to_string(shape_.width) + ", " +
         std::to_string(classes_) + " classes";
}

}  // namespace dit
