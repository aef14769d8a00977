// Sample-quality metrics on synthetic Gaussians with known answers: the Fréchet distance in closed
// form, estimates from samples, invariance to sample order, and precision/recall at their limits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "core/philox.h"
#include "eval/fid.h"

namespace dit::eval {
namespace {

// The closed form for covariances that share eigenvectors R: S = R diag(d) R^T, so
// FD = ||mu1 - mu2||^2 + sum_i (d1_i + d2_i - 2 sqrt(d1_i d2_i)).
Gaussian rotated(std::vector<double> mu, const std::vector<double>& d, double angle) {
  // R: a rotation in the plane of the first two axes (the covariance is not diagonal).
  const std::int64_t f = static_cast<std::int64_t>(d.size());
  std::vector<double> r(static_cast<std::size_t>(f * f), 0.0);
  for (std::int64_t i = 0; i < f; ++i) r[i * f + i] = 1.0;
  r[0] = std::cos(angle), r[1] = -std::sin(angle), r[f] = std::sin(angle), r[f + 1] = std::cos(angle);
  Gaussian g;
  g.f = f;
  g.mu = std::move(mu);
  g.sigma.assign(static_cast<std::size_t>(f * f), 0.0);
  for (std::int64_t a = 0; a < f; ++a)
    for (std::int64_t b = 0; b < f; ++b)
      for (std::int64_t k = 0; k < f; ++k) g.sigma[a * f + b] += r[a * f + k] * d[k] * r[b * f + k];
  return g;
}

double closed_form(const std::vector<double>& mu1, const std::vector<double>& d1,
                   const std::vector<double>& mu2, const std::vector<double>& d2) {
  double s = 0;
  for (std::size_t i = 0; i < mu1.size(); ++i) s += (mu1[i] - mu2[i]) * (mu1[i] - mu2[i]);
  for (std::size_t i = 0; i < d1.size(); ++i) s += d1[i] + d2[i] - 2 * std::sqrt(d1[i] * d2[i]);
  return s;
}

Features sample(const std::vector<double>& mu, const std::vector<double>& sd, std::int64_t n, std::uint64_t stream) {
  Features x;
  x.n = n;
  x.f = static_cast<std::int64_t>(mu.size());
  Philox rng(9, RngPurpose::Test, 0, stream);
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < x.f; ++j) x.data.push_back(mu[j] + sd[j] * rng.normal());
  return x;
}

TEST(FrechetDistance, MatchesTheClosedFormOfTwoGaussians) {
  const std::vector<double> mu1 = {0.5, -1, 2, 0}, mu2 = {0, 0, 1, 3}, d1 = {1, 4, 0.25, 2}, d2 = {9, 1, 1, 0.5};
  for (double angle : {0.0, 0.7}) {
    const double got = frechet_distance(rotated(mu1, d1, angle), rotated(mu2, d2, angle));
    const double want = closed_form(mu1, d1, mu2, d2);
    EXPECT_NEAR(got, want, 1e-12 * want) << "rotation " << angle;
  }
  const Gaussian g = rotated(mu1, d1, 0.3);
  EXPECT_NEAR(frechet_distance(g, g), 0.0, 1e-12);
}

// From 20000 samples per set the estimate lands within 2% of the closed form: the sampled means and
// variances each err by about 1/sqrt(N) = 0.7% (the test prints the error it sees).
TEST(FrechetDistance, SampleEstimateConvergesToTheClosedForm) {
  const std::vector<double> mu1 = {0, 1, 0}, mu2 = {1, 1, -1}, sd1 = {1, 2, 0.5}, sd2 = {2, 1, 0.5};
  const Features a = sample(mu1, sd1, 20000, 1), b = sample(mu2, sd2, 20000, 2);
  const double got = frechet_distance(fit_gaussian(a), fit_gaussian(b));
  std::vector<double> d1, d2;
  for (double s : sd1) d1.push_back(s * s);
  for (double s : sd2) d2.push_back(s * s);
  const double want = closed_form(mu1, d1, mu2, d2);
  std::printf("    FD from samples %.4f, closed form %.4f (relative error %.2e)\n", got, want,
              std::abs(got - want) / want);
  EXPECT_NEAR(got, want, 0.02 * want);
}

TEST(Metrics, InvariantToSampleOrder) {
  const Features a = sample({0, 0}, {1, 1}, 300, 3), b = sample({0.5, 0}, {1, 2}, 300, 4);
  Features shuffled = a;
  std::vector<std::int64_t> order(static_cast<std::size_t>(a.n));
  std::iota(order.begin(), order.end(), 0);
  Philox rng(1, RngPurpose::Test, 1, 0);
  for (std::int64_t i = a.n - 1; i > 0; --i) std::swap(order[i], order[rng.below(static_cast<std::uint32_t>(i + 1))]);
  for (std::int64_t i = 0; i < a.n; ++i)
    std::copy(a.row(order[i]), a.row(order[i]) + a.f, shuffled.data.begin() + i * a.f);
  ASSERT_NE(shuffled.data, a.data);
  const double f1 = frechet_distance(fit_gaussian(a), fit_gaussian(b));
  const double f2 = frechet_distance(fit_gaussian(shuffled), fit_gaussian(b));
  EXPECT_NEAR(f1, f2, 1e-12 * f1);
  const PrecisionRecall p1 = precision_recall(a, b), p2 = precision_recall(shuffled, b);
  EXPECT_EQ(p1.precision, p2.precision);
  EXPECT_EQ(p1.recall, p2.recall);
}

TEST(PrecisionRecall, LimitsAndAHalfOffManifoldSet) {
  const Features real = sample({0, 0}, {1, 1}, 400, 5);
  const PrecisionRecall same = precision_recall(real, real);
  EXPECT_EQ(same.precision, 1.0);
  EXPECT_EQ(same.recall, 1.0);
  const Features far = sample({100, 100}, {1, 1}, 400, 6);
  const PrecisionRecall apart = precision_recall(real, far);
  EXPECT_EQ(apart.precision, 0.0);
  EXPECT_EQ(apart.recall, 0.0);
  // Half the generated samples from the real distribution, half far away: precision about 1/2;
  // recall high, since the on-manifold half covers the real set.
  Features half = sample({0, 0}, {1, 1}, 200, 7);
  const Features off = sample({100, 100}, {1, 1}, 200, 8);
  half.data.insert(half.data.end(), off.data.begin(), off.data.end());
  half.n = 400;
  const PrecisionRecall pr = precision_recall(real, half);
  EXPECT_NEAR(pr.precision, 0.5, 0.05);
  EXPECT_GT(pr.recall, 0.8);
}

}  // namespace
}  // namespace dit::eval
