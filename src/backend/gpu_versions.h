// The GPU libraries as loaded at run time (driver, CUDA runtime, cuBLASLt, cuDNN, NCCL, NVRTC) next to
// what this build needs, and the one-line message for each that is too old. The GPU host brings
// its own libraries (toolkit, pip packages), so what a binary was built against is not what runs.
#pragma once

#include <string>
#include <vector>

namespace dit {

// Versions as numbers: major * 10000 + minor * 100 + patch (the driver and runtime report
// major * 1000 + minor * 10, converted to this form).
struct LibraryVersion {
  std::string library;  // "driver", "runtime", "cuBLASLt", "cuDNN", "NCCL", "NVRTC"
  int found = 0;        // as loaded; 0 when absent (no driver)
  int needed = 0;       // the least this build works with
  std::string why;      // what needs it ("the unified SDPA operations", ...)
};

// "9.19.0"; "none" for 0.
std::string version_text(int v);

// Each library as loaded, in the order above. Empty in a build without the CUDA backend. Asking
// needs no GPU (the driver reports 0 when there is none).
std::vector<LibraryVersion> gpu_library_versions();

// "driver 13.0.0, runtime 13.0.0, cuBLASLt 13.1.0, cuDNN 9.19.0, NCCL 2.28.9, NVRTC 13.0.0" ("" when
// empty).
std::string describe_gpu_versions(const std::vector<LibraryVersion>& v);

// One message per library below what the build needs, naming the library, the version found and
// the version needed: "cuDNN 9.10.2 is loaded; this build needs 9.17.0 or newer (...)".
std::vector<std::string> gpu_version_problems(const std::vector<LibraryVersion>& v);

}  // namespace dit
