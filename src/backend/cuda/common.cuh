// Helpers shared by the CUDA backend's .cu files: storage types (fp32, bf16, fp16 loaded and
// stored as fp32 in registers), dtype dispatch, launch geometry, warp reductions, and the host
// checks of shapes and devices that mirror the CPU backend's messages.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/backend.h"
#include "backend/cuda/cuda_check.h"

namespace dit::cuda {

using i64 = std::int64_t;

constexpr int kThreads = 256;
constexpr unsigned kFullMask = 0xffffffffu;

// ---- storage types: every kernel computes in fp32 ------------------------------------------
__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }

template <typename T>
__device__ __forceinline__ T from_f32(float x);
template <>
__device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ __half from_f32<__half>(float x) { return __float2half_rn(x); }

// Calls fn(T{}) with T the storage type of a float dtype; integer tensors are refused.
template <typename Fn>
void dispatch_float(DType t, const char* what, Fn&& fn) {
  switch (t) {
    case DType::F32: fn(float{}); return;
    case DType::BF16: fn(__nv_bfloat16{}); return;
    case DType::F16: fn(__half{}); return;
    default: break;
  }
  DIT_FAIL(what, ": needs a float tensor, got ", dtype_name(t));
}

// Pure data movement only needs the element width: fn(U{}) with U a 2- or 4-byte integer.
template <typename Fn>
void dispatch_width(DType t, Fn&& fn) {
  if (dtype_size(t) == 2) fn(std::uint16_t{});
  else fn(std::uint32_t{});
}

// ---- launch geometry ---------------------------------------------------------------------
// A bounded grid for grid-stride loops: enough blocks to fill the GPU, never more than needed.
inline int grid_for(i64 n, int threads = kThreads) {
  const i64 b = (n + threads - 1) / threads;
  const i64 cap = 65535LL * 8;
  return static_cast<int>(b < 1 ? 1 : (b > cap ? cap : b));
}

__device__ __forceinline__ i64 global_thread() {
  return static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ i64 grid_stride() { return static_cast<i64>(gridDim.x) * blockDim.x; }

// ---- reductions (fixed order: results are the same run to run) ----------------------------
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}
__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

// Sum of v over the block (blockDim.x a multiple of 32): the total on thread 0, 0 elsewhere.
// Every thread of the block must call it; consecutive calls may share the scratch.
__device__ __forceinline__ double block_sum(double v) {
  __shared__ double warp_part[32];
  v = warp_sum(v);
  __syncthreads();  // a previous call's readers are done with warp_part
  if (threadIdx.x % 32 == 0) warp_part[threadIdx.x / 32] = v;
  __syncthreads();
  double t = 0;
  if (threadIdx.x == 0)
    for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) t += warp_part[w];
  return t;
}

// ---- host-side checks ----------------------------------------------------------------------
inline void check_on_device(const Tensor& t, const char* what) {
  DIT_CHECK(t.device == Device::Cuda, what, ": the CUDA backend needs device tensors");
}
inline void check_f32(const Tensor& t, const char* what) {
  check_on_device(t, what);
  DIT_CHECK(t.dtype == DType::F32, what, ": must be fp32, got ", dtype_name(t.dtype));
}
inline void same_numel(const Tensor& a, const Tensor& b, const char* what) {
  DIT_CHECK(a.numel() == b.numel(), what, ": sizes differ, ", a.shape.str(), " vs ",
            b.shape.str());
}
inline void same_dtype(const Tensor& a, const Tensor& b, const char* what) {
  DIT_CHECK(a.dtype == b.dtype, what, ": dtypes differ, ", dtype_name(a.dtype), " vs ",
            dtype_name(b.dtype));
}

// (N, T, D) of an activation paired with a (N, K*D) modulation tensor.
struct TokenGeom {
  i64 n, t, d;
};
inline TokenGeom token_geom(const Tensor& x, const ModChunk& m, const char* what) {
  DIT_CHECK(x.shape.rank == 3, what, ": expected (N, T, D), got ", x.shape.str());
  TokenGeom g{x.dim(0), x.dim(1), x.dim(2)};
  DIT_CHECK(m.mod.shape.rank == 2 && m.mod.dim(0) == g.n && g.d > 0 && m.mod.dim(1) % g.d == 0 &&
                m.index >= 0 && m.index < m.mod.dim(1) / g.d,
            what, ": modulation ", m.mod.shape.str(), " chunk ", m.index, " does not fit x ",
            x.shape.str());
  check_on_device(m.mod, what);
  same_dtype(x, m.mod, what);
  return g;
}

// Where one chunk sits in a modulation tensor: element (n, i) of the chunk is at
// base[n * ld + offset + i].
template <typename T>
struct Chunk {
  T* base;
  i64 ld, offset;
};
template <typename T>
Chunk<T> chunk_of(const ModChunk& m, i64 d) {
  return Chunk<T>{static_cast<T*>(m.mod.data), m.mod.dim(1), m.index * d};
}

}  // namespace dit::cuda
