// Backend conformance of the composed attention's row steps — softmax_rows (computing or given the
// logsumexp), softmax_rows_bwd and row_dot — on every backend against float64, at row lengths that
// are not multiples of a warp (1, 37, 300), so that a GPU failure in the composed attention can be
// traced to its GEMMs or to one of these.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend_params.h"
#include "core/arena.h"
#include "core/philox.h"
#include "reference_ops.h"
#include "value_checks.h"

namespace dit {
namespace {

using ref::i64;
using ref::Vec;

class RowOps : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::string why;
    if (!backend_available(GetParam(), &why))
      GTEST_SKIP() << "backend '" << GetParam() << "' is not available: " << why;
    be_ = make_backend(GetParam());
    arena_ = std::make_unique<Arena>(*be_);
  }
  Backend& be() { return *be_; }
  DType dt() const { return be_->compute_dtype(); }
  double tol() const { return ref::tolerance(dt()); }

  std::vector<float> download(const Tensor& t) {
    std::vector<float> h(static_cast<std::size_t>(t.numel()));
    be_->copy(Tensor{h.data(), DType::F32, t.shape, Device::Host}, t);
    be_->synchronize();
    return h;
  }
  // Normal numbers in a tensor of dtype t; *held as stored.
  Tensor input(Shape s, DType t, double stddev, Vec* held) {
    Philox rng(0x70e5ull, RngPurpose::Test, 0, stream_++);
    std::vector<float> v(static_cast<std::size_t>(s.numel()));
    for (float& x : v) x = static_cast<float>(stddev * rng.normal());
    Tensor x = arena_->tensor(s, t);
    be_->copy(x, Tensor{v.data(), DType::F32, s, Device::Host});
    be_->synchronize();
    const std::vector<float> back = download(x);
    held->assign(back.begin(), back.end());
    return x;
  }
  Tensor poisoned(Shape s, DType t) {
    Tensor x = arena_->tensor(s, t);
    be_->fill(x, NAN);
    return x;
  }

 private:
  std::unique_ptr<Backend> be_;
  std::unique_ptr<Arena> arena_;
  std::uint64_t stream_ = 0;
};

constexpr i64 kRows = 5;
const i64 kLengths[] = {1, 37, 300};

TEST_P(RowOps, SoftmaxRowsComputesAndRecomputesFromTheLogsumexp) {
  for (i64 len : kLengths) {
    Vec s_h;
    const Tensor s = input({kRows, len}, DType::F32, 3.0, &s_h);
    Vec p_want(kRows * len), lse_want(kRows);
    for (i64 r = 0; r < kRows; ++r) {
      double m = -INFINITY, sum = 0;
      for (i64 j = 0; j < len; ++j) m = std::max(m, s_h[r * len + j]);
      for (i64 j = 0; j < len; ++j) sum += std::exp(s_h[r * len + j] - m);
      lse_want[r] = m + std::log(sum);
      for (i64 j = 0; j < len; ++j) p_want[r * len + j] = std::exp(s_h[r * len + j] - lse_want[r]);
    }
    const std::string at = " L" + std::to_string(len);
    const Tensor p = poisoned({kRows, len}, dt()), lse = poisoned({kRows}, DType::F32);
    be().softmax_rows(s, p, lse, SoftmaxStats::Compute);
    check_values("softmax_rows p" + at, download(p), p_want, tol());
    check_values("softmax_rows lse" + at, download(lse), lse_want, tol());
    const Tensor p2 = poisoned({kRows, len}, dt());
    be().softmax_rows(s, p2, lse, SoftmaxStats::Given);
    check_values("softmax_rows p from lse" + at, download(p2), p_want, tol());
  }
}

TEST_P(RowOps, SoftmaxRowsBwdAndRowDot) {
  for (i64 len : kLengths) {
    Vec p_h, dp_h, delta_h, a_h, b_h;
    const Tensor p = input({kRows, len}, dt(), 0.3, &p_h);
    const Tensor dp = input({kRows, len}, DType::F32, 1.0, &dp_h);
    const Tensor delta = input({kRows}, DType::F32, 1.0, &delta_h);
    const Tensor a = input({kRows, len}, dt(), 1.0, &a_h), b = input({kRows, len}, dt(), 1.0, &b_h);
    Vec ds_want(kRows * len), dot_want(kRows, 0.0);
    for (i64 r = 0; r < kRows; ++r)
      for (i64 j = 0; j < len; ++j) {
        ds_want[r * len + j] = p_h[r * len + j] * (dp_h[r * len + j] - delta_h[r]);
        dot_want[r] += a_h[r * len + j] * b_h[r * len + j];
      }
    const std::string at = " L" + std::to_string(len);
    const Tensor ds = poisoned({kRows, len}, dt());
    be().softmax_rows_bwd(p, dp, delta, ds);
    check_values("softmax_rows_bwd ds" + at, download(ds), ds_want, tol());
    const Tensor out = poisoned({kRows}, DType::F32);
    be().row_dot(a, b, out);
    check_values("row_dot" + at, download(out), dot_want, tol());
    // In place, as the composed attention calls it: ds written over p.
    be().softmax_rows_bwd(p, dp, delta, p);
    check_values("softmax_rows_bwd ds in place of p" + at, download(p), ds_want, tol());
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, RowOps, all_backends(), backend_test_name);

}  // namespace
}  // namespace dit
