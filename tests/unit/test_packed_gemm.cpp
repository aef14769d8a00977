// The packed GEMM (backend/cpu/packed_gemm.h), each kernel this CPU has: against a float64
// product in every transpose combination, at edge sizes around the tiles and the depth block,
// with leading dimensions wider than the matrices, alpha and beta, inside a parallel region; the
// same bits at 1, 2 and 3 threads; exact on integer-valued inputs; C untouched outside its
// columns; DIT_CPU_GEMM's values.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/packed_gemm.h"
#include "core/error.h"

namespace dit {
namespace {

using cpu::GemmKernel;

std::vector<GemmKernel> kernels_here() {
  std::vector<GemmKernel> ks;
  if (__builtin_cpu_supports("avx512f")) ks.push_back(GemmKernel::Avx512);
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) ks.push_back(GemmKernel::Avx2);
  return ks;
}

struct Case {
  std::int64_t m, n, k;
  Transpose ta, tb;
  float alpha, beta;
};

struct Operands {
  std::int64_t lda, ldb, ldc;
  std::vector<float> a, b, c;
};

// Operands with leading dimensions 3 wider than needed; C's extra columns hold a sentinel.
Operands operands(const Case& c, std::uint32_t seed, bool integers) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> small(-3, 3);
  auto fill = [&](std::vector<float>& v) {
    for (float& x : v) x = integers ? static_cast<float>(small(gen)) : normal(gen);
  };
  Operands o;
  o.lda = (c.ta == Transpose::No ? c.k : c.m) + 3;
  o.ldb = (c.tb == Transpose::No ? c.n : c.k) + 3;
  o.ldc = c.n + 3;
  o.a.resize(static_cast<std::size_t>((c.ta == Transpose::No ? c.m : c.k) * o.lda));
  o.b.resize(static_cast<std::size_t>((c.tb == Transpose::No ? c.k : c.n) * o.ldb));
  o.c.resize(static_cast<std::size_t>(c.m * o.ldc));
  fill(o.a);
  fill(o.b);
  fill(o.c);
  for (std::int64_t i = 0; i < c.m; ++i)
    for (std::int64_t j = c.n; j < o.ldc; ++j) o.c[i * o.ldc + j] = 1234.5f;
  if (c.beta == 0.f)  // beta 0 never reads C: NaN there must not come through
    for (std::int64_t i = 0; i < c.m; ++i)
      for (std::int64_t j = 0; j < c.n; ++j) o.c[i * o.ldc + j] = std::nanf("");
  return o;
}

std::vector<double> reference(const Case& c, const Operands& o) {
  std::vector<double> r(static_cast<std::size_t>(c.m * c.n));
  for (std::int64_t i = 0; i < c.m; ++i)
    for (std::int64_t j = 0; j < c.n; ++j) {
      double s = 0;
      for (std::int64_t p = 0; p < c.k; ++p) {
        const double av = c.ta == Transpose::No ? o.a[i * o.lda + p] : o.a[p * o.lda + i];
        const double bv = c.tb == Transpose::No ? o.b[p * o.ldb + j] : o.b[j * o.ldb + p];
        s += av * bv;
      }
      r[i * c.n + j] = c.alpha * s + (c.beta == 0.f ? 0.0 : c.beta * double(o.c[i * o.ldc + j]));
    }
  return r;
}

std::vector<float> run(GemmKernel kernel, const Case& c, Operands o, int threads, bool in_parallel = false) {
  const int before = omp_get_max_threads();
  cpu_set_num_threads(threads);
  auto call = [&] {
    cpu::packed_sgemm(kernel, c.ta, c.tb, c.m, c.n, c.k, c.alpha, o.a.data(), o.lda, o.b.data(), o.ldb, c.beta,
                      o.c.data(), o.ldc);
  };
  if (in_parallel) {
#pragma omp parallel num_threads(2)
    {
#pragma omp single
      call();
    }
  } else {
    call();
  }
  omp_set_num_threads(before);
  return o.c;
}

std::string name(GemmKernel k, const Case& c) {
  return std::string(cpu::gemm_kernel_name(k)) + " " + std::to_string(c.m) + "x" + std::to_string(c.n) + "x" +
         std::to_string(c.k) + (c.ta == Transpose::Yes ? " A^T" : "") + (c.tb == Transpose::Yes ? " B^T" : "");
}

std::vector<Case> cases() {
  std::vector<Case> out;
  const std::int64_t sizes[][3] = {{1, 1, 1},    {7, 33, 5},     {8, 32, 256},  {9, 31, 257},   {6, 16, 8},
                                   {13, 70, 29}, {64, 96, 64},   {65, 129, 513}, {200, 40, 300}, {5, 700, 70},
                                   {3, 5, 0},    {130, 260, 96}};
  int i = 0;
  for (const auto& s : sizes)
    for (Transpose ta : {Transpose::No, Transpose::Yes})
      for (Transpose tb : {Transpose::No, Transpose::Yes}) {
        const float alphas[] = {1.f, 0.5f, -2.f};
        const float betas[] = {0.f, 1.f, 0.25f};
        out.push_back({s[0], s[1], s[2], ta, tb, alphas[i % 3], betas[(i / 3) % 3]});
        ++i;
      }
  return out;
}

TEST(PackedGemm, MatchesFloat64InEveryLayout) {
  const auto ks = kernels_here();
  if (ks.empty()) GTEST_SKIP() << "this CPU has neither AVX-512F nor AVX2 with FMA: no packed kernel to test";
  for (GemmKernel k : ks)
    for (const Case& c : cases()) {
      const Operands o = operands(c, 7, false);
      const std::vector<double> want = reference(c, o);
      for (bool in_parallel : {false, true}) {
        const std::vector<float> got = run(k, c, o, 2, in_parallel);
        double err = 0, norm = 0;
        for (std::int64_t i = 0; i < c.m; ++i) {
          for (std::int64_t j = 0; j < c.n; ++j) {
            const double d = got[i * o.ldc + j] - want[i * c.n + j];
            err += d * d;
            norm += want[i * c.n + j] * want[i * c.n + j];
          }
          for (std::int64_t j = c.n; j < o.ldc; ++j) ASSERT_EQ(got[i * o.ldc + j], 1234.5f) << name(k, c);
        }
        EXPECT_LE(std::sqrt(err), 1e-6 * std::sqrt(norm) + 1e-30) << name(k, c) << (in_parallel ? " in parallel" : "");
      }
    }
}

TEST(PackedGemm, ExactOnIntegers) {
  for (GemmKernel k : kernels_here())
    for (const Case& c : cases()) {
      if (c.alpha == 0.5f || c.beta == 0.25f) continue;  // keep every partial sum an exact float
      const Operands o = operands(c, 3, true);
      const std::vector<double> want = reference(c, o);
      const std::vector<float> got = run(k, c, o, 2);
      for (std::int64_t i = 0; i < c.m; ++i)
        for (std::int64_t j = 0; j < c.n; ++j) ASSERT_EQ(got[i * o.ldc + j], want[i * c.n + j]) << name(k, c);
    }
}

TEST(PackedGemm, TheSameBitsAtAnyThreadCount) {
  for (GemmKernel k : kernels_here())
    for (const Case& c : cases()) {
      const Operands o = operands(c, 11, false);
      const std::vector<float> one = run(k, c, o, 1), two = run(k, c, o, 2), three = run(k, c, o, 3);
      EXPECT_EQ(0, std::memcmp(one.data(), two.data(), one.size() * sizeof(float))) << name(k, c);
      EXPECT_EQ(0, std::memcmp(one.data(), three.data(), one.size() * sizeof(float))) << name(k, c);
    }
}

TEST(PackedGemm, KernelSetting) {
  EXPECT_EQ(cpu::choose_gemm_kernel("eigen"), GemmKernel::Eigen);
  const GemmKernel best = cpu::choose_gemm_kernel(nullptr);
  EXPECT_EQ(cpu::choose_gemm_kernel(""), best);
  EXPECT_EQ(cpu::choose_gemm_kernel("auto"), best);
  try {
    cpu::choose_gemm_kernel("avx1024");
    FAIL() << "DIT_CPU_GEMM=avx1024 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("DIT_CPU_GEMM=avx1024: expected auto, avx512, avx2 or eigen"),
              std::string::npos)
        << e.what();
  }
  if (__builtin_cpu_supports("avx512f")) {
    EXPECT_EQ(best, GemmKernel::Avx512);
    EXPECT_EQ(cpu::choose_gemm_kernel("avx2"), GemmKernel::Avx2);
  } else {
    EXPECT_THROW(cpu::choose_gemm_kernel("avx512"), Error);
  }
}

}  // namespace
}  // namespace dit
