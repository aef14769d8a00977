// The fixed-order GEMM (backend/cpu/ordered_gemm.h): exact on integer-valued inputs in every
// transpose combination and at edge sizes, close to Eigen's product on random ones, and the same
// bits at 1, 2 and 3 threads (Eigen's product is not: its depth blocking follows the threads).
#include <gtest/gtest.h>
#include <omp.h>

#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/ordered_gemm.h"

namespace dit {
namespace {

struct Case {
  std::int64_t m, n, k;
  Transpose ta, tb;
};

std::vector<float> stored(std::int64_t rows, std::int64_t cols, std::mt19937& gen, bool integers) {
  std::vector<float> v(static_cast<std::size_t>(rows * cols));
  std::uniform_int_distribution<int> small(-3, 3);
  std::normal_distribution<float> normal;
  for (float& x : v) x = integers ? static_cast<float>(small(gen)) : normal(gen);
  return v;
}

// C = alpha op(A) op(B) + beta C with both GEMMs, from the same inputs.
struct Result {
  std::vector<float> ordered, eigen;
};
Result multiply(const Case& c, bool integers, int threads, std::uint32_t seed) {
  std::mt19937 gen(seed);
  const std::int64_t lda = c.ta == Transpose::No ? c.k : c.m, ldb = c.tb == Transpose::No ? c.n : c.k;
  const auto a = stored(c.ta == Transpose::No ? c.m : c.k, lda, gen, integers);
  const auto b = stored(c.tb == Transpose::No ? c.k : c.n, ldb, gen, integers);
  Result r{stored(c.m, c.n, gen, integers), {}};
  r.eigen = r.ordered;
  const float alpha = 2.f, beta = integers ? 1.f : 0.5f;
  const int before = omp_get_max_threads();
  cpu_set_num_threads(threads);
  cpu_sgemm_ordered(c.ta, c.tb, c.m, c.n, c.k, alpha, a.data(), lda, b.data(), ldb, beta, r.ordered.data(), c.n);
  cpu_sgemm(c.ta, c.tb, c.m, c.n, c.k, alpha, a.data(), lda, b.data(), ldb, beta, r.eigen.data(), c.n);
  omp_set_num_threads(before);
  return r;
}

const Case kCases[] = {
    {4, 32, 7, Transpose::No, Transpose::No},      {13, 70, 29, Transpose::No, Transpose::No},
    {64, 300, 288, Transpose::No, Transpose::No},  {9, 33, 100, Transpose::No, Transpose::Yes},
    {16, 9, 5000, Transpose::No, Transpose::Yes},  {37, 21, 64, Transpose::Yes, Transpose::No},
    {5, 6, 17, Transpose::Yes, Transpose::Yes},    {1, 1, 1, Transpose::No, Transpose::No},
    {3, 5, 0, Transpose::No, Transpose::Yes},
};

TEST(OrderedGemm, ExactOnIntegersInEveryLayout) {
  for (const Case& c : kCases) {
    const Result r = multiply(c, true, 2, 1);
    EXPECT_EQ(r.ordered, r.eigen) << c.m << "x" << c.n << "x" << c.k;
    bool nonzero = false;
    for (float x : r.ordered) nonzero = nonzero || x != 0.f;
    EXPECT_TRUE(nonzero);
  }
}

TEST(OrderedGemm, CloseToEigenAndTheSameBitsAtAnyThreadCount) {
  for (const Case& c : kCases) {
    const Result one = multiply(c, false, 1, 2), two = multiply(c, false, 2, 2), three = multiply(c, false, 3, 2);
    ASSERT_EQ(one.ordered.size(), two.ordered.size());
    EXPECT_EQ(0, std::memcmp(one.ordered.data(), two.ordered.data(), one.ordered.size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(one.ordered.data(), three.ordered.data(), one.ordered.size() * sizeof(float)));
    double err = 0, norm = 0;
    for (std::size_t i = 0; i < one.ordered.size(); ++i) {
      err += (one.ordered[i] - one.eigen[i]) * double(one.ordered[i] - one.eigen[i]);
      norm += double(one.eigen[i]) * one.eigen[i];
    }
    EXPECT_LE(err, 1e-9 * norm + 1e-20) << c.m << "x" << c.n << "x" << c.k;
  }
}

}  // namespace
}  // namespace dit
