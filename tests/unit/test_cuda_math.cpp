// The shared math.h functors compiled into CUDA kernels must give the CPU's numbers.
// Without a GPU (CI, most machines) each test skips and says why.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "backend/math.h"
#include "core/philox.h"

#ifdef DIT_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device.h"
#include "backend/cuda/elementwise.h"
#endif

namespace dit {

#ifdef DIT_HAVE_CUDA
namespace {
// Device copy of a host vector, freed at scope exit.
struct DeviceVec {
  float* p = nullptr;
  std::size_t n;
  explicit DeviceVec(const std::vector<float>& h) : n(h.size()) {
    DIT_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&p), n * sizeof(float)));
    DIT_CUDA_CHECK(cudaMemcpy(p, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  }
  ~DeviceVec() { cudaFree(p); }
  std::vector<float> host() const {
    std::vector<float> h(n);
    DIT_CUDA_CHECK(cudaMemcpy(h.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost));
    return h;
  }
};

double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, r = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    d += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    r += double(b[i]) * b[i];
  }
  return std::sqrt(d / r);
}
}  // namespace

TEST(CudaMath, KernelsMatchHostFunctors) {
  std::string why;
  if (cuda::device_count(&why) == 0) GTEST_SKIP() << "CUDA kernels not run: " << why;
  const std::int64_t n = 100003;
  std::vector<float> x(n), dy(n), zero(n, 0.f);
  Philox rng(1, RngPurpose::Test, 0, 0);
  for (auto& v : x) v = 4.f * rng.normal();
  for (auto& v : dy) v = rng.normal();
  DeviceVec dx(x), ddy(dy), out(zero);
  std::vector<float> ref(n);

  cuda::gelu_tanh_fwd(dx.p, out.p, n, nullptr);
  for (std::int64_t i = 0; i < n; ++i) ref[i] = math::GeluTanh::forward(x[i]);
  EXPECT_LT(rel_err(out.host(), ref), 1e-6);
  cuda::gelu_tanh_bwd(dx.p, ddy.p, out.p, n, nullptr);
  for (std::int64_t i = 0; i < n; ++i) ref[i] = dy[i] * math::GeluTanh::derivative(x[i]);
  EXPECT_LT(rel_err(out.host(), ref), 1e-6);
  cuda::silu_fwd(dx.p, out.p, n, nullptr);
  for (std::int64_t i = 0; i < n; ++i) ref[i] = math::Silu::forward(x[i]);
  EXPECT_LT(rel_err(out.host(), ref), 1e-6);
  DIT_CUDA_CHECK(cudaDeviceSynchronize());
}
#else
TEST(CudaMath, KernelsMatchHostFunctors) {
  GTEST_SKIP() << "this build has no CUDA backend (configured with DIT_CUDA=OFF or without nvcc)";
}
#endif

}  // namespace dit
