// The one place that knows which backends this build has.
#include <string>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#ifdef DIT_HAVE_CUDA
#include "backend/cuda/device.h"
#endif

namespace dit {

bool backend_available(std::string_view name, std::string* why_not) {
  std::string reason;
  bool ok = false;
  if (name == "cpu") {
    ok = true;
  } else if (name == "cuda") {
#ifdef DIT_HAVE_CUDA
    int count = cuda::device_count(&reason);
    ok = false;
    if (count > 0) reason = "the CUDA backend's layer primitives are not built yet";
#else
    reason = "this build has no CUDA backend (configure with -DDIT_CUDA=ON on a machine with nvcc)";
#endif
  } else {
    reason = "unknown backend '" + std::string(name) + "': expected cpu or cuda";
  }
  if (why_not) *why_not = reason;
  return ok;
}

std::unique_ptr<Backend> make_backend(std::string_view name) {
  std::string why;
  DIT_CHECK(backend_available(name, &why), "backend '", name, "' is not available: ", why);
  return std::make_unique<CpuBackend>();
}

}  // namespace dit
