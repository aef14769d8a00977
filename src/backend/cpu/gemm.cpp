// fp32 GEMM for the CPU backend through Eigen, which parallelizes a product with the same
// OpenMP threads as every other loop (and stays single-threaded inside a parallel region, as in
// the attention). Debian's OpenBLAS runs its own pthread pool: side by side its sgemm is within
// about 15% of Eigen on these shapes (benchmarks/bench_gemm.cpp), but with two OpenMP threads
// its spinning pool made a whole training step 4x slower, so Eigen it is.
#include <omp.h>

#include <Eigen/Core>

#include "backend/cpu/cpu_backend.h"

namespace dit {

namespace {
using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMap = Eigen::Map<const RowMat, 0, Eigen::OuterStride<>>;
using Map = Eigen::Map<RowMat, 0, Eigen::OuterStride<>>;
}  // namespace

void cpu_sgemm(Transpose ta, Transpose tb, std::int64_t m, std::int64_t n, std::int64_t k,
               float alpha, const float* a, std::int64_t lda, const float* b, std::int64_t ldb,
               float beta, float* c, std::int64_t ldc) {
  Map C(c, m, n, Eigen::OuterStride<>(ldc));
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (beta == 0.f) C.setZero(); else C *= beta;
    return;
  }
  // A stored as (m, k) or, transposed, as (k, m); B likewise.
  ConstMap A(a, ta == Transpose::No ? m : k, ta == Transpose::No ? k : m, Eigen::OuterStride<>(lda));
  ConstMap B(b, tb == Transpose::No ? k : n, tb == Transpose::No ? n : k, Eigen::OuterStride<>(ldb));
  auto run = [&](const auto& opA, const auto& opB) {
    if (beta == 0.f) {
      C.noalias() = alpha * (opA * opB);
    } else {
      if (beta != 1.f) C *= beta;
      C.noalias() += alpha * (opA * opB);
    }
  };
  if (ta == Transpose::No && tb == Transpose::No) run(A, B);
  else if (ta == Transpose::No) run(A, B.transpose());
  else if (tb == Transpose::No) run(A.transpose(), B);
  else run(A.transpose(), B.transpose());
}

void CpuBackend::gemm(const Tensor& a, Transpose ta, const Tensor& b, Transpose tb,
                      const Tensor& c, Accumulate acc, float alpha) {
  const GemmShape g = gemm_shape(a, ta, b, tb, c);
  const float beta = acc == Accumulate::Add ? 1.f : 0.f;
  for (std::int64_t i = 0; i < g.batch; ++i)
    cpu_sgemm(ta, tb, g.m, g.n, g.k, alpha, a.f32() + i * g.ar * g.ac, g.ac, b.f32() + i * g.br * g.bc, g.bc,
              beta, c.f32() + i * g.m * g.n, g.n);
}

void cpu_set_num_threads(int n) { omp_set_num_threads(n); }

}  // namespace dit
