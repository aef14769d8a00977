// The cuBLASLt state of one CUDA backend: handles, a persistent workspace, and a cache of matmul
// plans (descriptors plus the heuristic's algorithm) keyed by shape, dtype and pointer alignment,
// so the heuristic runs once per distinct GEMM rather than on every call.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>

#include <array>
#include <cstdint>
#include <map>

#include "backend/backend.h"

namespace dit::cuda {

// One planned cublasLtMatmul; has_algo false means the heuristic found nothing and the call goes
// to cublasGemmStridedBatchedEx instead (which accepts any alignment).
struct GemmPlan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;  // cuBLASLt's A, B, C (= D)
  cublasLtMatmulAlgo_t algo{};
  bool has_algo = false;
};

struct GemmContext {
  explicit GemmContext(cudaStream_t stream);
  ~GemmContext();
  GemmContext(const GemmContext&) = delete;
  GemmContext& operator=(const GemmContext&) = delete;

  cudaStream_t stream;
  bool tf32 = false;  // DIT_TF32=1: fp32 GEMMs on TF32 tensor cores (10-bit mantissa products)
  cublasLtHandle_t lt = nullptr;
  cublasHandle_t blas = nullptr;
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
  // key: m, n, k, batch, ta, tb, dtype, beta != 0, the three pointer alignments, and the bias
  // pointer's alignment (0: no bias epilogue)
  std::map<std::array<std::int64_t, 12>, GemmPlan> plans;
};

}  // namespace dit::cuda
