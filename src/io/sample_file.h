// Raw samples as HDF5: `samples` (N, C, H, W) float32 in the model's range and `labels` (N,)
// int32, written atomically (temporary name, then rename).
#pragma once

#include <string>
#include <vector>

namespace dit {

void write_samples_h5(const std::string& path, const std::vector<float>& samples,
                      const std::vector<int>& labels, int channels, int height, int width);

}  // namespace dit
