// The one place that knows which backends this build has, and how a name such as "cuda:bf16"
// (backend, then an optional compute dtype) maps to one.
#include <optional>
#include <string>
#include <utility>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/storage_backend.h"
#ifdef DIT_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/device.h"
#endif

namespace dit {

namespace {

// "cuda:bf16" -> ("cuda", bf16); a bare name has no dtype. Throws on an unknown dtype.
std::pair<std::string_view, std::optional<DType>> split_name(std::string_view name) {
  const std::size_t colon = name.find(':');
  if (colon == std::string_view::npos) return {name, std::nullopt};
  return {name.substr(0, colon), parse_dtype(name.substr(colon + 1))};
}

bool available(std::string_view base, DType compute, std::string& reason) {
  if (base == "cpu") {
    if (compute != DType::I32) return true;
    reason = "the CPU backend stores fp32, bf16 or fp16, not int32";
    return false;
  }
  if (base == "cuda") {
#ifdef DIT_HAVE_CUDA
    return cuda::device_count(&reason) > 0;
#else
    reason = "this build has no CUDA backend (configure with -DDIT_CUDA=ON on a machine with nvcc)";
    return false;
#endif
  }
  reason = "unknown backend '" + std::string(base) + "': expected cpu or cuda";
  return false;
}

}  // namespace

bool backend_available(std::string_view name, std::string* why_not) {
  std::string reason;
  bool ok = false;
  try {
    const auto [base, dtype] = split_name(name);
    ok = available(base, dtype.value_or(DType::F32), reason);
  } catch (const Error& e) {
    reason = e.what();
  }
  if (why_not) *why_not = reason;
  return ok;
}

std::unique_ptr<Backend> make_backend(std::string_view name, DType compute) {
  const auto [base, dtype] = split_name(name);
  DIT_CHECK(!dtype || *dtype == compute, "backend '", name, "' names ",
            dtype_name(dtype.value_or(compute)), " but ", dtype_name(compute), " was asked for");
  std::string why;
  DIT_CHECK(available(base, compute, why), "backend '", name, "' is not available: ", why);
#ifdef DIT_HAVE_CUDA
  if (base == "cuda") return std::make_unique<CudaBackend>(compute);
#endif
  if (compute != DType::F32) return std::make_unique<CpuStorageBackend>(compute);
  return std::make_unique<CpuBackend>();
}

std::unique_ptr<Backend> make_backend(std::string_view name) {
  return make_backend(name, split_name(name).second.value_or(DType::F32));
}

}  // namespace dit
