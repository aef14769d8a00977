// Raw samples as HDF5: `samples` (N, C, H, W) float32 in the model's range and `labels` (N,)
// int32, written atomically (io/atomic_file.h: complete or not at all).
#pragma once

#include <string>
#include <vector>

namespace dit {

void write_samples_h5(const std::string& path, const std::vector<float>& samples,
                      const std::vector<int>& labels, int channels, int height, int width);

// Reads a samples file (untrusted): `samples` 4-d float, `labels` 1-d integers of the same
// length, each in [0, 1e6); every value finite. Errors name the file and the object.
struct SamplesFile {
  std::vector<float> samples;
  std::vector<int> labels;
  int channels = 0, height = 0, width = 0;
};
SamplesFile read_samples_h5(const std::string& path);

}  // namespace dit
