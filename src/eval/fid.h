// Sample-quality metrics in a feature space: Fréchet distance (FID when the features are
// Inception-V3 pool features), and precision / recall of Kynkäänniemi et al. (2019) with k-NN
// manifolds. Features are rows of a (N, F) row-major matrix; every metric is invariant to the
// order of the rows. Computed on the host in double.
#pragma once

#include <cstdint>
#include <vector>

namespace dit::eval {

// N rows of F features.
struct Features {
  std::int64_t n = 0, f = 0;
  std::vector<double> data;  // (n, f)
  const double* row(std::int64_t i) const { return data.data() + i * f; }
};

// Mean (F) and covariance (F, F, unbiased: / (N - 1)) of a feature set.
struct Gaussian {
  std::vector<double> mu, sigma;
  std::int64_t f = 0;
};
Gaussian fit_gaussian(const Features& x);

// ||mu1 - mu2||^2 + tr(S1 + S2 - 2 (S1^1/2 S2 S1^1/2)^1/2): the Fréchet distance of two Gaussians
// (the FID formula), with the matrix square roots from symmetric eigendecompositions (negative
// eigenvalues of rounding are clamped to 0).
double frechet_distance(const Gaussian& a, const Gaussian& b);

struct PrecisionRecall {
  double precision = 0;  // share of generated samples inside the real manifold
  double recall = 0;     // share of real samples inside the generated manifold
};
// A sample is inside a manifold when it lies within the distance of some member to that member's
// k-th nearest neighbour in its own set (k = 3 in the paper).
inline constexpr int kNearestNeighbour = 3;  // k of precision/recall, as in the paper
// The fewest samples a set may have: each needs a k-th nearest other sample.
inline constexpr std::int64_t kMinEvalSamples = kNearestNeighbour + 1;
PrecisionRecall precision_recall(const Features& real, const Features& generated, int k = kNearestNeighbour);

}  // namespace dit::eval
