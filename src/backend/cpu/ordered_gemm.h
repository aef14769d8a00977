// A row-major fp32 GEMM whose every output element is one fixed-order sum, so its bits depend on
// neither the thread count nor the CPU's cache sizes (Eigen's products depend on both: they pick
// their depth blocking from them). For results that must be the same on every machine, such as
// the evaluation classifier that `dit_mp evaluate` trains (eval/classifier.cpp).
#pragma once

#include <cstdint>

#include "backend/backend.h"  // Transpose

namespace dit {

// C (m x n) = alpha * op(A) op(B) + beta * C, leading dimensions lda, ldb, ldc (as cpu_sgemm).
// Each C element is one thread's sum over k in a fixed order set by the shape alone.
void cpu_sgemm_ordered(Transpose ta, Transpose tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
                       const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
                       std::int64_t ldc);

}  // namespace dit
