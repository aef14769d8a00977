// Checking for CUDA runtime, cuBLAS/cuBLASLt and cuDNN calls: a failure throws dit::Error with
// the statement, file, line and the library's own error string. Checks stay on in release builds.
#pragma once

#include <cublas_api.h>
#include <cuda_runtime_api.h>
#include <cudnn_graph.h>

#include <cstring>
#include <string>

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

// NCCL calls (the file using it includes <nccl.h>): NCCL's string for the result, then its last
// detailed message (e.g. "Duplicate GPU detected"), which ncclGetLastError keeps per process.
#define DIT_NCCL_CHECK(stmt)                                                                \
  do {                                                                                      \
    ncclResult_t dit_nccl_rc_ = (stmt);                                                     \
    if (dit_nccl_rc_ != ncclSuccess) {                                                      \
      const char* dit_nccl_last_ = ncclGetLastError(nullptr);                               \
      ::dit::detail::throw_error(                                                           \
          __FILE__, __LINE__,                                                               \
          ::dit::detail::concat("NCCL call failed: " #stmt ": ",                            \
                                ncclGetErrorString(dit_nccl_rc_), " (",                     \
                                static_cast<int>(dit_nccl_rc_), ")",                        \
                                dit_nccl_last_ && *dit_nccl_last_ ? ": " : "",              \
                                dit_nccl_last_ ? dit_nccl_last_ : ""));                     \
    }                                                                                       \
  } while (0)

// After a kernel launch: a bad configuration (grid, shared memory) shows here, at the launch;
// faults inside the kernel show at the next synchronizing call, which is checked too.
#define DIT_CUDA_LAUNCH_CHECK() DIT_CUDA_CHECK(cudaGetLastError())

namespace dit {

namespace detail {
// The message of DIT_CUDNN_CHECK: the call, cuDNN's string for the status, its code, and cuDNN's
// last detailed message (which often names the attribute or limit at fault), then [file:line].
[[noreturn]] inline void throw_cudnn_error(const char* file, int line, const char* stmt,
                                           cudnnStatus_t rc) {
  char detail[512] = {};
  cudnnGetLastErrorString(detail, sizeof detail);
  const char* base = std::strrchr(file, '/');
  throw Error(concat("cuDNN call failed: ", stmt, ": ", cudnnGetErrorString(rc), " (", static_cast<int>(rc), ")",
                     detail[0] ? ": " : "", detail, " [", base ? base + 1 : file, ":", line, "]"));
}
}  // namespace detail

}  // namespace dit

#define DIT_CUDNN_CHECK(stmt)                                                               \
  do {                                                                                      \
    cudnnStatus_t dit_cudnn_rc_ = (stmt);                                                   \
    if (dit_cudnn_rc_ != CUDNN_STATUS_SUCCESS)                                              \
      ::dit::detail::throw_cudnn_error(__FILE__, __LINE__, #stmt, dit_cudnn_rc_);           \
  } while (0)
