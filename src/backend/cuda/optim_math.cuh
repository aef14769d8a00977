// The optimizer's per-element updates in the CUDA kernels: math.h's AdamW and EMA (the arithmetic
// the CPU backend runs as written there) with every product, quotient and sum rounded on its own.
// nvcc contracts a * b + c into one FMA where it chooses, and on an H200 it chose differently in the
// fused AdamW + EMA kernel and in the separate steps, which then differed in the last bit
// (TrainOps.FusedOptimizerPassEqualsTheSeparateSteps). The _rn intrinsics are never contracted, so
// every kernel that updates an element computes the same bits. Keep these in step with math.h.
#pragma once

#include "backend/math.h"

namespace dit::cuda {

__device__ inline void adamw_update_rn(float& p, float g, float& m, float& v, const math::AdamWParams& h) {
  g = __fmul_rn(g, h.grad_scale);
  p = __fsub_rn(p, __fmul_rn(__fmul_rn(h.lr, h.weight_decay), p));
  m = __fadd_rn(__fmul_rn(h.beta1, m), __fmul_rn(1.f - h.beta1, g));
  v = __fadd_rn(__fmul_rn(h.beta2, v), __fmul_rn(__fmul_rn(1.f - h.beta2, g), g));
  const float denom = __fadd_rn(__fsqrt_rn(__fdiv_rn(v, h.bc2)), h.eps);
  p = __fsub_rn(p, __fdiv_rn(__fmul_rn(__fdiv_rn(h.lr, h.bc1), m), denom));
}

__device__ inline float ema_update_rn(float ema, float p, float decay) {
  return __fadd_rn(__fmul_rn(decay, ema), __fmul_rn(1.f - decay, p));
}

}  // namespace dit::cuda
