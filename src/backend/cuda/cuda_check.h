// Checking for CUDA runtime and cuBLAS/cuBLASLt calls: a failure throws dit::Error with the
// statement, file, line and the library's own error string. Checks stay on in release builds.
#pragma once

#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include "core/error.h"

#define DIT_CUDA_CHECK(stmt)                                                                \
  do {                                                                                      \
    cudaError_t dit_cuda_rc_ = (stmt);                                                      \
    if (dit_cuda_rc_ != cudaSuccess)                                                        \
      ::dit::detail::throw_error(__FILE__, __LINE__,                                        \
                                 ::dit::detail::concat("CUDA call failed: " #stmt ": ",     \
                                                       cudaGetErrorString(dit_cuda_rc_)));  \
  } while (0)

// cuBLAS and cuBLASLt share cublasStatus_t (and its string table).
#define DIT_CUBLAS_CHECK(stmt)                                                              \
  do {                                                                                      \
    cublasStatus_t dit_cublas_rc_ = (stmt);                                                 \
    if (dit_cublas_rc_ != CUBLAS_STATUS_SUCCESS)                                            \
      ::dit::detail::throw_error(                                                           \
          __FILE__, __LINE__,                                                               \
          ::dit::detail::concat("cuBLAS call failed: " #stmt ": ",                          \
                                cublasGetStatusString(dit_cublas_rc_), " (",                \
                                static_cast<int>(dit_cublas_rc_), ")"));                    \
  } while (0)

// After a kernel launch: a bad configuration (grid, shared memory) shows here, at the launch;
// faults inside the kernel show at the next synchronizing call, which is checked too.
#define DIT_CUDA_LAUNCH_CHECK() DIT_CUDA_CHECK(cudaGetLastError())
