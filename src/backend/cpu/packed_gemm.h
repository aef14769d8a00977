// The CPU backend's one fp32 GEMM (internal to backend/cpu): packed operands and a register-tile
// micro-kernel, in the layered blocking of Goto's GEMM. For every C (MR x NR) tile and every
// depth block of kKC: C_tile (+)= alpha * A_panel (kc, MR) B_strip (kc, NR), with A's panels and
// B's strips packed contiguous and zero-padded, B's block (kKC x NC) shared by the threads, each
// thread packing its own rows of A (MC x kKC).
//
// Kernels, chosen once per process at the first GEMM (cpu_gemm_kernel()):
//   avx512  8 x 32 tiles, 16 zmm accumulators (CPUs with AVX-512F);
//   avx2    6 x 16 tiles, 12 ymm accumulators (CPUs with AVX2 and FMA);
//   eigen   Eigen's GEMM (any CPU; also the GEMM of builds before the packed kernels).
// DIT_CPU_GEMM=avx512|avx2|eigen forces one (a kernel the CPU lacks is refused with a message);
// unset or "auto" takes the first the CPU supports. The convolution (image_ops.cpp) runs the
// avx512 tile too, on its own packing, and Eigen's path when the kernel is not avx512.
//
// Results: the depth block kKC is a constant, so every C element is the same sequence of fp32
// operations whatever the thread count and the cache sizes (MC and NC, taken from the caches the
// machine reports, change only which thread computes a tile and when). A result depends on the
// inputs, the shape and the kernel. (The eigen kernel's also depend on the thread count and caches.)
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/backend.h"  // Transpose

namespace dit::cpu {

enum class GemmKernel { Avx512, Avx2, Eigen };

const char* gemm_kernel_name(GemmKernel k);

// The kernel of this process: DIT_CPU_GEMM or the best the CPU supports, decided once.
GemmKernel gemm_kernel();

// Parses a DIT_CPU_GEMM value ("auto", "avx512", "avx2", "eigen"; null or empty is auto) against
// the CPU's features; throws naming the variable, the value and what was expected.
GemmKernel choose_gemm_kernel(const char* value);

// C (m x n) = alpha * op(A) op(B) + beta * C, row-major, leading dimensions lda, ldb, ldc, on the
// packed kernel `kernel` (Avx512 or Avx2). Uses the OpenMP threads unless called inside a
// parallel region.
void packed_sgemm(GemmKernel kernel, Transpose ta, Transpose tb, std::int64_t m, std::int64_t n, std::int64_t k,
                  float alpha, const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta,
                  float* c, std::int64_t ldc);

// The same product on a given kernel, Eigen's included (gemm.cpp); cpu_sgemm is this on
// gemm_kernel().
void sgemm_on(GemmKernel kernel, Transpose ta, Transpose tb, std::int64_t m, std::int64_t n, std::int64_t k,
              float alpha, const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
              std::int64_t ldc);

// The avx512 register tile, for callers that pack their own operands (the convolution):
// c (mr x nr valid of an MR x NR tile, row stride ldc) = (add ? c : 0) + alpha * a b, with a
// (kc, kTileMR) and b (kc, kTileNR) packed, b 64-byte aligned. Only on CPUs with AVX-512F.
constexpr int kTileMR = 8, kTileNR = 32;
void avx512_tile(const float* a, const float* b, std::int64_t kc, float* c, std::int64_t ldc, float alpha, bool add,
                 int mr, int nr);

// A 64-byte aligned scratch buffer of at least `floats` floats, one per (thread, slot), kept and
// grown between calls. Slots 0-3 are the convolution's, 4-5 the GEMM's.
float* thread_scratch(int slot, std::size_t floats);

}  // namespace dit::cpu
