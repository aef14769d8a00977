// CUDA device discovery, usable from host code that is compiled without nvcc.
#pragma once

#include <string>

namespace dit::cuda {

// Number of visible CUDA devices; 0 with the reason in *why when there is no usable GPU
// (no driver, "driver version is insufficient", no device).
int device_count(std::string* why = nullptr);

}  // namespace dit::cuda
