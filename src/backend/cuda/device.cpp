// CUDA device discovery. A machine without a driver answers "CUDA driver version is
// insufficient" or "no CUDA-capable device": both mean "no GPU here", never an error.
#include "backend/cuda/device.h"

#include <cuda_runtime_api.h>

namespace dit::cuda {

int device_count(std::string* why) {
  int count = 0;
  const cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc != cudaSuccess) {
    if (why) *why = std::string("no usable CUDA device: ") + cudaGetErrorString(rc);
    cudaGetLastError();  // clear the sticky error state
    return 0;
  }
  if (count == 0 && why) *why = "no CUDA device is visible";
  return count;
}

}  // namespace dit::cuda
