// Checking for CUDA runtime calls: a failure throws dit::Error with the statement, file, line and
// CUDA's own error string. (cuBLAS, cuDNN and NCCL get their twins with the CUDA backend.)
#pragma once

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
