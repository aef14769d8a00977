// The GPU libraries' versions as loaded (see backend/gpu_versions.h). Each is asked of the
// library itself, so it is the shared object the loader found, not the headers of the build.
#include <cublasLt.h>
#include <dlfcn.h>
#include <cuda_runtime_api.h>
#include <cudnn_graph.h>
#include <nccl.h>

#include <string>

#include "backend/cuda/cudnn_attention.h"
#include "backend/gpu_versions.h"

namespace dit {

namespace {
// The driver and runtime report major * 1000 + minor * 10.
int from_cuda(int v) { return v / 1000 * 10000 + v % 1000 / 10 * 100; }

// NVRTC of the build's CUDA major, as the loader finds it (cuDNN opens it by that name for its
// runtime-compiled engines, the SDPA ones among them): 0 when it cannot be opened. Opened and
// asked through dlsym, so the binary itself does not need it to start.
int nvrtc_loaded_version() {
  const std::string name = "libnvrtc.so." + std::to_string(CUDART_VERSION / 1000);
  void* lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) return 0;
  using VersionFn = int (*)(int*, int*);
  const auto version = reinterpret_cast<VersionFn>(dlsym(lib, "nvrtcVersion"));
  int major = 0, minor = 0;
  const int v = version && version(&major, &minor) == 0 ? major * 10000 + minor * 100 : 0;
  dlclose(lib);
  return v;
}
}  // namespace

std::vector<LibraryVersion> gpu_library_versions() {
  int driver = 0, runtime = 0, nccl = 0;
  if (cudaDriverGetVersion(&driver) != cudaSuccess) driver = 0;
  if (cudaRuntimeGetVersion(&runtime) != cudaSuccess) runtime = 0;
  cudaGetLastError();
  if (ncclGetVersion(&nccl) != ncclSuccess) nccl = 0;
  const int build_major = CUDART_VERSION / 1000 * 10000;
  // NCCL_VERSION_CODE is major * 10000 + minor * 100 + patch since 2.9; ncclCommSplit is 2.18.
  return {
      {"driver", from_cuda(driver), build_major, "the CUDA runtime of this build"},
      {"runtime", from_cuda(runtime), build_major, "the CUDA runtime of this build"},
      {"cuBLASLt", static_cast<int>(cublasLtGetVersion()), CUBLAS_VER_MAJOR * 10000,
       "the cuBLASLt of this build"},
      {"cuDNN", cuda::cudnn_loaded_version(), cuda::kCudnnNeeded, "the unified SDPA operations"},
      {"NCCL", nccl, 21800, "ncclCommSplit"},
      {"NVRTC", nvrtc_loaded_version(), build_major, "cuDNN's runtime-compiled SDPA engines"},
  };
}

}  // namespace dit
