// Elementwise CUDA kernels instantiated from the shared math.h functors (the same formulas the
// CPU backend runs). fp32 device pointers; launches go to the given stream.
#pragma once

#include <cstdint>

#include "backend/math.h"

typedef struct CUstream_st* cudaStream_t;

namespace dit::cuda {

void gelu_tanh_fwd(const float* x, float* y, std::int64_t n, cudaStream_t s);
void gelu_tanh_bwd(const float* x, const float* dy, float* dx, std::int64_t n, cudaStream_t s);
void silu_fwd(const float* x, float* y, std::int64_t n, cudaStream_t s);
// dx = dy * silu'(x), or dx += ... when accumulate
void silu_bwd(const float* x, const float* dy, float* dx, std::int64_t n, bool accumulate,
              cudaStream_t s);
void adamw_step(float* p, const float* g, float* m, float* v, std::int64_t n,
                const math::AdamWParams& h, cudaStream_t s);
void ema_step(float* ema, const float* p, float decay, std::int64_t n, cudaStream_t s);

}  // namespace dit::cuda
