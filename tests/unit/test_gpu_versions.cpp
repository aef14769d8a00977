// The GPU library version check (backend/gpu_versions.h): a library below what the build needs is
// one message naming it, the version found and the version needed; the versions as loaded are
// listed in a CUDA build (asked of the libraries, no GPU needed) and absent without one.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "backend/gpu_versions.h"

namespace dit {
namespace {

TEST(GpuVersions, TooOldIsOneMessageNamingFoundAndNeeded) {
  const std::vector<LibraryVersion> v = {
      {"driver", 120800, 130000, "the CUDA runtime of this build"},
      {"runtime", 130000, 130000, ""},
      {"cuBLASLt", 130100, 130000, ""},
      {"cuDNN", 91002, 91700, "the unified SDPA operations"},
      {"NCCL", 22809, 21800, ""},
  };
  const std::vector<std::string> p = gpu_version_problems(v);
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0], "driver 12.8.0 is loaded; this build needs 13.0.0 or newer (the CUDA runtime of this build)");
  EXPECT_EQ(p[1], "cuDNN 9.10.2 is loaded; this build needs 9.17.0 or newer (the unified SDPA operations)");
  EXPECT_EQ(describe_gpu_versions(v),
            "driver 12.8.0, runtime 13.0.0, cuBLASLt 13.1.0, cuDNN 9.10.2, NCCL 2.28.9");
  const std::vector<std::string> none = gpu_version_problems({{"driver", 0, 130000, ""}});
  ASSERT_EQ(none.size(), 1u);
  EXPECT_EQ(none[0], "driver none (not found); this build needs 13.0.0 or newer");
  EXPECT_TRUE(gpu_version_problems({{"NCCL", 21800, 21800, ""}}).empty());
}

TEST(GpuVersions, LoadedVersionsAreListedInACudaBuild) {
  const std::vector<LibraryVersion> v = gpu_library_versions();
#ifdef DIT_HAVE_CUDA
  ASSERT_EQ(v.size(), 6u);
  const char* names[] = {"driver", "runtime", "cuBLASLt", "cuDNN", "NCCL", "NVRTC"};
  for (std::size_t i = 0; i < v.size(); ++i) {
    EXPECT_EQ(v[i].library, names[i]);
    EXPECT_GT(v[i].needed, 0);
    if (i > 0) EXPECT_GT(v[i].found, 0) << v[i].library << " did not report a version";
  }
  std::printf("    versions: %s\n", describe_gpu_versions(v).c_str());
  for (const std::string& p : gpu_version_problems(v)) std::printf("    version problem: %s\n", p.c_str());
#else
  EXPECT_TRUE(v.empty());
#endif
}

}  // namespace
}  // namespace dit
