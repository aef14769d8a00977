// The fixture of a conformance suite over all_backends() (backend_params.h): the backend the
// parameter names (the test skips, saying why, where it is not available), an arena on it, inputs
// of normal numbers as the backend's dtype holds them, outputs poisoned with NaN, and downloads.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "backend/backend.h"
#include "core/arena.h"
#include "core/philox.h"
#include "reference_ops.h"

namespace dit {

class BackendSuite : public ::testing::TestWithParam<std::string> {
 protected:
  // `seed` keys the suite's inputs (each input() call draws the next stream).
  explicit BackendSuite(std::uint64_t seed) : seed_(seed) {}
  void SetUp() override {
    std::string why;
    if (!backend_available(GetParam(), &why)) GTEST_SKIP() << "backend '" << GetParam() << "' is not available: " << why;
    be_ = make_backend(GetParam());
    arena_ = std::make_unique<Arena>(*be_);
  }
  Backend& be() { return *be_; }
  double tol() const { return ref::tolerance(be_->compute_dtype()); }
  std::vector<float> download(const Tensor& t) {
    std::vector<float> h(static_cast<std::size_t>(t.numel()));
    be().copy(Tensor{h.data(), DType::F32, t.shape, Device::Host}, t);
    be().synchronize();
    return h;
  }
  // A backend tensor of normal numbers; *held gets what it holds after rounding to the dtype.
  Tensor input(Shape s, ref::Vec* held, double stddev = 1.0, double mean = 0.0) {
    Philox rng(seed_, RngPurpose::Test, 0, stream_++);
    std::vector<float> v(static_cast<std::size_t>(s.numel()));
    for (auto& x : v) x = static_cast<float>(mean + stddev * rng.normal());
    Tensor t = arena_->tensor(s, be_->compute_dtype());
    be().copy(t, Tensor{v.data(), DType::F32, s, Device::Host});
    const std::vector<float> back = download(t);
    *held = ref::Vec(back.begin(), back.end());
    return t;
  }
  Tensor poisoned(Shape s) {
    Tensor t = arena_->tensor(s, be_->compute_dtype());
    be().fill(t, NAN);
    return t;
  }

  std::unique_ptr<Backend> be_;
  std::unique_ptr<Arena> arena_;

 private:
  std::uint64_t seed_, stream_ = 0;
};

}  // namespace dit
