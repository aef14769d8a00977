// Fréchet distance and k-NN precision/recall (see metrics.h). The matrix square roots come from
// the CPU backend's host linear algebra; exact pairwise distances (the sets here are thousands of
// rows at most).
#include "eval/fid.h"

#include <algorithm>
#include <cmath>

#include "backend/cpu/linalg.h"
#include "core/error.h"

namespace dit::eval {

namespace {

double squared_distance(const double* a, const double* b, std::int64_t f) {
  double s = 0;
  for (std::int64_t j = 0; j < f; ++j) s += (a[j] - b[j]) * (a[j] - b[j]);
  return s;
}

// Squared distance of each row to its k-th nearest other row of the same set.
std::vector<double> kth_radius(const Features& x, int k) {
  DIT_CHECK(x.n > k, "precision/recall: ", x.n, " samples cannot have a ", k, "-th nearest neighbour");
  std::vector<double> r(static_cast<std::size_t>(x.n)), d(static_cast<std::size_t>(x.n - 1));
  for (std::int64_t i = 0; i < x.n; ++i) {
    std::size_t m = 0;
    for (std::int64_t j = 0; j < x.n; ++j)
      if (j != i) d[m++] = squared_distance(x.row(i), x.row(j), x.f);
    std::nth_element(d.begin(), d.begin() + (k - 1), d.end());
    r[static_cast<std::size_t>(i)] = d[static_cast<std::size_t>(k - 1)];
  }
  return r;
}

// Share of `probe` rows within some member's radius of the manifold set.
double coverage(const Features& manifold, const std::vector<double>& radius, const Features& probe) {
  std::int64_t inside = 0;
  for (std::int64_t i = 0; i < probe.n; ++i)
    for (std::int64_t j = 0; j < manifold.n; ++j)
      if (squared_distance(probe.row(i), manifold.row(j), probe.f) <= radius[static_cast<std::size_t>(j)]) {
        ++inside;
        break;
      }
  return probe.n > 0 ? double(inside) / double(probe.n) : 0.0;
}

}  // namespace

Gaussian fit_gaussian(const Features& x) {
  DIT_CHECK(x.n >= 2 && x.f >= 1 && static_cast<std::int64_t>(x.data.size()) == x.n * x.f,
            "fit_gaussian: ", x.n, " samples of ", x.f, " features (", x.data.size(),
            " values); at least 2 samples are needed");
  Gaussian g;
  g.f = x.f;
  g.mu.assign(static_cast<std::size_t>(x.f), 0.0);
  for (std::int64_t i = 0; i < x.n; ++i)
    for (std::int64_t j = 0; j < x.f; ++j) g.mu[static_cast<std::size_t>(j)] += x.row(i)[j];
  for (double& m : g.mu) m /= double(x.n);
  g.sigma.assign(static_cast<std::size_t>(x.f * x.f), 0.0);
  for (std::int64_t i = 0; i < x.n; ++i)
    for (std::int64_t a = 0; a < x.f; ++a) {
      const double da = x.row(i)[a] - g.mu[static_cast<std::size_t>(a)];
      for (std::int64_t b = 0; b < x.f; ++b)
        g.sigma[static_cast<std::size_t>(a * x.f + b)] += da * (x.row(i)[b] - g.mu[static_cast<std::size_t>(b)]);
    }
  for (double& s : g.sigma) s /= double(x.n - 1);
  return g;
}

double frechet_distance(const Gaussian& a, const Gaussian& b) {
  DIT_CHECK(a.f == b.f && a.f > 0, "frechet_distance: ", a.f, " against ", b.f, " features");
  double mean = 0;
  for (std::int64_t j = 0; j < a.f; ++j) {
    const double d = a.mu[static_cast<std::size_t>(j)] - b.mu[static_cast<std::size_t>(j)];
    mean += d * d;
  }
  const std::int64_t f = a.f;
  const std::vector<double> r1 = linalg::sqrt_psd(a.sigma, f);
  const std::vector<double> cross = linalg::sqrt_psd(linalg::matmul(linalg::matmul(r1, b.sigma, f), r1, f), f);
  double trace = 0;
  for (std::int64_t i = 0; i < f; ++i)
    trace += a.sigma[static_cast<std::size_t>(i * f + i)] + b.sigma[static_cast<std::size_t>(i * f + i)] -
             2.0 * cross[static_cast<std::size_t>(i * f + i)];
  return mean + trace;
}

PrecisionRecall precision_recall(const Features& real, const Features& generated, int k) {
  DIT_CHECK(real.f == generated.f, "precision/recall: ", real.f, " against ", generated.f, " features");
  DIT_CHECK(k >= 1, "precision/recall: k = ", k, ": expected at least 1");
  PrecisionRecall pr;
  pr.precision = coverage(real, kth_radius(real, k), generated);
  pr.recall = coverage(generated, kth_radius(generated, k), real);
  return pr;
}

}  // namespace dit::eval
