// Formatting and checking of the GPU library versions (see gpu_versions.h); the versions
// themselves come from backend/cuda/versions.cpp in a CUDA build.
#include "backend/gpu_versions.h"

#include "core/error.h"

namespace dit {

std::string version_text(int v) {
  if (v <= 0) return "none";
  return detail::concat(v / 10000, ".", v / 100 % 100, ".", v % 100);
}

#ifndef DIT_HAVE_CUDA
std::vector<LibraryVersion> gpu_library_versions() { return {}; }
#endif

std::string describe_gpu_versions(const std::vector<LibraryVersion>& v) {
  std::string s;
  for (const LibraryVersion& l : v) s += (s.empty() ? "" : ", ") + l.library + " " + version_text(l.found);
  return s;
}

std::vector<std::string> gpu_version_problems(const std::vector<LibraryVersion>& v) {
  std::vector<std::string> out;
  for (const LibraryVersion& l : v)
    if (l.found < l.needed)
      out.push_back(detail::concat(l.library, " ", version_text(l.found),
                                   l.found > 0 ? " is loaded" : " (not found)", "; this build needs ",
                                   version_text(l.needed), " or newer", l.why.empty() ? "" : " (",
                                   l.why, l.why.empty() ? "" : ")"));
  return out;
}

}  // namespace dit
