// fp32 GEMM for the CPU backend: the packed kernels of packed_gemm.h where the CPU has AVX-512F
// or AVX2, Eigen's GEMM elsewhere (or under DIT_CPU_GEMM=eigen). Both use the same OpenMP threads
// as every other loop and stay single-threaded inside a parallel region (as in the attention).
// OpenBLAS is no dependency: its own spinning pthread pool beside two OpenMP threads made a whole
// training step 4x slower; benchmarks/bench_gemm.cpp keeps it as a comparison.
#include <omp.h>

#include <Eigen/Core>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/packed_gemm.h"

namespace dit {

namespace {
using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMap = Eigen::Map<const RowMat, 0, Eigen::OuterStride<>>;
using Map = Eigen::Map<RowMat, 0, Eigen::OuterStride<>>;
}  // namespace

namespace {
void eigen_sgemm(Transpose ta, Transpose tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
                 const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
                 std::int64_t ldc) {
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
}  // namespace

void cpu::sgemm_on(GemmKernel kernel, Transpose ta, Transpose tb, std::int64_t m, std::int64_t n, std::int64_t k,
                   float alpha, const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta,
                   float* c, std::int64_t ldc) {
  if (kernel == cpu::GemmKernel::Eigen)
    eigen_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  else
    cpu::packed_sgemm(kernel, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void cpu_sgemm(Transpose ta, Transpose tb, std::int64_t m, std::int64_t n, std::int64_t k,
               float alpha, const float* a, std::int64_t lda, const float* b, std::int64_t ldb,
               float beta, float* c, std::int64_t ldc) {
  cpu::sgemm_on(cpu::gemm_kernel(), ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
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
