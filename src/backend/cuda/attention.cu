// CUDA backend: fused multi-head attention, forward and backward, as plain kernels (flash-style:
// no T x T matrix in memory). Each block takes 16 rows (4 warps x 4 rows) of one (sample, head)
// and streams the other side in tiles of 32 through shared memory, one tile row per lane;
// softmax is online in fp32 and only the row logsumexp is saved. Backward recomputes the
// probabilities from it in two passes (dQ by query blocks, then dK/dV by key blocks), so every
// output is written by exactly one thread: no atomics, reproducible run to run.
// The two entry points offer a bf16/fp16 problem to cuDNN first (cudnn_attention.h); where cuDNN
// does not serve (and in fp32) the composed attention runs (tensor-core GEMMs and the row kernels
// of rows.cu); these scalar kernels run only under DIT_ATTENTION=kernel. All keep the same lse.
#include <cmath>
#include <type_traits>

#include "backend/composed_attention.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cudnn_attention.h"

namespace dit {

using cuda::from_f32;
using cuda::i64;
using cuda::kFullMask;
using cuda::to_f32;

namespace {

constexpr int kWarps = 4;
constexpr int kRowsPerWarp = 4;
constexpr int kBlockRows = kWarps * kRowsPerWarp;  // rows a block owns
constexpr int kTile = 32;                          // rows of a streamed tile: one per lane
constexpr int kMaxHeadDim = 128;  // DiT uses 64 (S, B, L) and 72 (XL)

// Geometry: qkv rows hold [q | k | v] with heads contiguous inside each.
struct AttnArgs {
  i64 t, h, e;
  i64 ld;    // 3 * h * e: row stride of qkv and dqkv
  i64 ldo;   // h * e: row stride of out and dout
  int lds;   // shared-memory row stride of tiles read per lane: odd, so lanes hit distinct banks
  float scale;
};

// rows [r0, r0 + count) x [0, e) of a strided matrix into shared memory as fp32 (zero past t).
template <typename T>
__device__ void load_rows(const T* base, i64 ld, i64 r0, int count, const AttnArgs& a, float* dst,
                          int ldd) {
  const int e = static_cast<int>(a.e);
  for (int idx = threadIdx.x; idx < count * e; idx += blockDim.x) {
    const int r = idx / e, c = idx % e;
    dst[r * ldd + c] = r0 + r < a.t ? to_f32(base[(r0 + r) * ld + c]) : 0.f;
  }
}

__device__ __forceinline__ float dot(const float* x, const float* y, int e) {
  float s = 0.f;
  for (int c = 0; c < e; ++c) s += x[c] * y[c];
  return s;
}

// acc[c] += w * row[lane + 32 c] for the lane's columns.
template <int C>
__device__ __forceinline__ void add_scaled(float (&acc)[C], float w, const float* row, int e) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int c = 0; c < C; ++c)
    if (lane + 32 * c < e) acc[c] += w * row[lane + 32 * c];
}

template <typename T, int C>
__device__ void store_row(T* dst, const float (&acc)[C], float mul, int e) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int c = 0; c < C; ++c)
    if (lane + 32 * c < e) dst[lane + 32 * c] = from_f32<T>(acc[c] * mul);
}

// out = softmax(scale q k^T) v and lse per query row. Grid (N*H, T / kBlockRows).
template <typename T, int C>
__global__ void __launch_bounds__(kWarps * 32)
    attn_fwd_kernel(const T* qkv, T* out, float* lse, AttnArgs a) {
  extern __shared__ float smem[];
  const int e = static_cast<int>(a.e), lds = a.lds;
  float* ks = smem;               // [kTile][lds]
  float* vs = ks + kTile * lds;   // [kTile][lds]
  float* qs = vs + kTile * lds;   // [kBlockRows][e]
  const i64 bh = blockIdx.x, nb = bh / a.h, head = bh % a.h;
  const T* qb = qkv + nb * a.t * a.ld + head * a.e;
  const T* kb = qb + a.h * a.e;
  const T* vb = kb + a.h * a.e;
  const i64 q0 = static_cast<i64>(blockIdx.y) * kBlockRows;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  load_rows(qb, a.ld, q0, kBlockRows, a, qs, e);

  float m[kRowsPerWarp], l[kRowsPerWarp], o[kRowsPerWarp][C];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.f;
#pragma unroll
    for (int c = 0; c < C; ++c) o[r][c] = 0.f;
  }
  for (i64 k0 = 0; k0 < a.t; k0 += kTile) {
    __syncthreads();  // the previous tile is consumed (and the q rows are loaded)
    load_rows(kb, a.ld, k0, kTile, a, ks, lds);
    load_rows(vb, a.ld, k0, kTile, a, vs, lds);
    __syncthreads();
    const bool valid = k0 + lane < a.t;
    const int jn = a.t - k0 < kTile ? static_cast<int>(a.t - k0) : kTile;
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const float s = valid ? a.scale * dot(qs + (warp * kRowsPerWarp + r) * e, ks + lane * lds, e)
                            : -INFINITY;
      const float m_new = fmaxf(m[r], cuda::warp_max(s));  // finite: key k0 is valid
      const float p = valid ? math::exp_f32(s - m_new) : 0.f;
      const float corr = math::exp_f32(m[r] - m_new);  // 0 on the first tile
      l[r] = l[r] * corr + cuda::warp_sum(p);
      m[r] = m_new;
#pragma unroll
      for (int c = 0; c < C; ++c) o[r][c] *= corr;
      for (int j = 0; j < jn; ++j) add_scaled(o[r], __shfl_sync(kFullMask, p, j), vs + j * lds, e);
    }
  }
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const i64 row = q0 + warp * kRowsPerWarp + r;
    if (row >= a.t) continue;
    store_row(out + (nb * a.t + row) * a.ldo + head * a.e, o[r], 1.f / l[r], e);
    if (lane == 0) lse[bh * a.t + row] = m[r] + logf(l[r]);
  }
}

// dQ = scale sum_j P_ij (dP_ij - delta_i) k_j, with P = exp(scale q k^T - lse), dP = dO v^T and
// delta_i = dO_i . O_i (written to `delta` for the dK/dV pass). Grid (N*H, T / kBlockRows).
template <typename T, int C>
__global__ void __launch_bounds__(kWarps * 32)
    attn_bwd_dq_kernel(const T* qkv, const T* out, const float* lse, const T* dout, T* dqkv,
                       float* delta, AttnArgs a) {
  extern __shared__ float smem[];
  const int e = static_cast<int>(a.e), lds = a.lds;
  float* ks = smem;                      // [kTile][lds]
  float* vs = ks + kTile * lds;          // [kTile][lds]
  float* qs = vs + kTile * lds;          // [kBlockRows][e]
  float* dos = qs + kBlockRows * e;      // [kBlockRows][e]
  const i64 bh = blockIdx.x, nb = bh / a.h, head = bh % a.h;
  const T* qb = qkv + nb * a.t * a.ld + head * a.e;
  const T* kb = qb + a.h * a.e;
  const T* vb = kb + a.h * a.e;
  const i64 obase = nb * a.t * a.ldo + head * a.e;
  const i64 q0 = static_cast<i64>(blockIdx.y) * kBlockRows;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  load_rows(qb, a.ld, q0, kBlockRows, a, qs, e);
  load_rows(dout + obase, a.ldo, q0, kBlockRows, a, dos, e);
  __syncthreads();

  float lse_r[kRowsPerWarp], delta_r[kRowsPerWarp], dq[kRowsPerWarp][C];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const i64 row = q0 + warp * kRowsPerWarp + r;
    float d = 0.f;
    if (row < a.t)
      for (int c = lane; c < e; c += 32)
        d += dos[(warp * kRowsPerWarp + r) * e + c] * to_f32(out[obase + row * a.ldo + c]);
    delta_r[r] = cuda::warp_sum(d);
    lse_r[r] = row < a.t ? lse[bh * a.t + row] : 0.f;
    if (row < a.t && lane == 0) delta[bh * a.t + row] = delta_r[r];
#pragma unroll
    for (int c = 0; c < C; ++c) dq[r][c] = 0.f;
  }
  for (i64 k0 = 0; k0 < a.t; k0 += kTile) {
    __syncthreads();
    load_rows(kb, a.ld, k0, kTile, a, ks, lds);
    load_rows(vb, a.ld, k0, kTile, a, vs, lds);
    __syncthreads();
    const bool valid = k0 + lane < a.t;
    const int jn = a.t - k0 < kTile ? static_cast<int>(a.t - k0) : kTile;
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int rl = warp * kRowsPerWarp + r;
      const float s = a.scale * dot(qs + rl * e, ks + lane * lds, e);
      const float p = valid ? math::exp_f32(s - lse_r[r]) : 0.f;
      const float ds = p * (dot(dos + rl * e, vs + lane * lds, e) - delta_r[r]);
      for (int j = 0; j < jn; ++j) add_scaled(dq[r], __shfl_sync(kFullMask, ds, j), ks + j * lds, e);
    }
  }
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const i64 row = q0 + warp * kRowsPerWarp + r;
    if (row < a.t) store_row(dqkv + (nb * a.t + row) * a.ld + head * a.e, dq[r], a.scale, e);
  }
}

// dV_j = sum_i P_ij dO_i and dK_j = scale sum_i P_ij (dP_ij - delta_i) q_i for the block's keys.
// Grid (N*H, T / kBlockRows).
template <typename T, int C>
__global__ void __launch_bounds__(kWarps * 32)
    attn_bwd_dkv_kernel(const T* qkv, const float* lse, const float* delta, const T* dout,
                        T* dqkv, AttnArgs a) {
  extern __shared__ float smem[];
  const int e = static_cast<int>(a.e), lds = a.lds;
  float* kown = smem;                     // [kBlockRows][e]
  float* vown = kown + kBlockRows * e;    // [kBlockRows][e]
  float* qs = vown + kBlockRows * e;      // [kTile][lds]
  float* dos = qs + kTile * lds;          // [kTile][lds]
  float* ls = dos + kTile * lds;          // [kTile]
  float* dl = ls + kTile;                 // [kTile]
  const i64 bh = blockIdx.x, nb = bh / a.h, head = bh % a.h;
  const i64 qoff = nb * a.t * a.ld + head * a.e;
  const T* qb = qkv + qoff;
  const T* dob = dout + nb * a.t * a.ldo + head * a.e;
  const i64 k0 = static_cast<i64>(blockIdx.y) * kBlockRows;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  load_rows(qb + a.h * a.e, a.ld, k0, kBlockRows, a, kown, e);
  load_rows(qb + 2 * a.h * a.e, a.ld, k0, kBlockRows, a, vown, e);

  float dk[kRowsPerWarp][C], dv[kRowsPerWarp][C];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r)
#pragma unroll
    for (int c = 0; c < C; ++c) dk[r][c] = dv[r][c] = 0.f;
  for (i64 i0 = 0; i0 < a.t; i0 += kTile) {
    __syncthreads();
    load_rows(qb, a.ld, i0, kTile, a, qs, lds);
    load_rows(dob, a.ldo, i0, kTile, a, dos, lds);
    if (threadIdx.x < kTile) {
      const bool ok = i0 + threadIdx.x < a.t;
      ls[threadIdx.x] = ok ? lse[bh * a.t + i0 + threadIdx.x] : 0.f;
      dl[threadIdx.x] = ok ? delta[bh * a.t + i0 + threadIdx.x] : 0.f;
    }
    __syncthreads();
    const bool valid = i0 + lane < a.t;
    const int in = a.t - i0 < kTile ? static_cast<int>(a.t - i0) : kTile;
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int rl = warp * kRowsPerWarp + r;
      const float s = a.scale * dot(qs + lane * lds, kown + rl * e, e);
      const float p = valid ? math::exp_f32(s - ls[lane]) : 0.f;
      const float ds = p * (dot(dos + lane * lds, vown + rl * e, e) - dl[lane]);
      for (int i = 0; i < in; ++i) {
        add_scaled(dv[r], __shfl_sync(kFullMask, p, i), dos + i * lds, e);
        add_scaled(dk[r], __shfl_sync(kFullMask, ds, i), qs + i * lds, e);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const i64 row = k0 + warp * kRowsPerWarp + r;
    if (row >= a.t) continue;
    T* drow = dqkv + qoff + row * a.ld;
    store_row(drow + a.h * a.e, dk[r], a.scale, e);
    store_row(drow + 2 * a.h * a.e, dv[r], 1.f, e);
  }
}

// fn(std::integral_constant<int, C>) with C = the head-dim columns per lane (E <= 32 C).
template <typename Fn>
void dispatch_head_chunks(i64 e, Fn&& fn) {
  DIT_CHECK(e >= 1 && e <= kMaxHeadDim, "attention: head dim ", e,
            " is outside the plain kernels' range [1, ", kMaxHeadDim, "]");
  const i64 c = (e + 31) / 32;
  if (c == 1) fn(std::integral_constant<int, 1>{});
  else if (c == 2) fn(std::integral_constant<int, 2>{});
  else if (c == 3) fn(std::integral_constant<int, 3>{});
  else fn(std::integral_constant<int, 4>{});
}

// Dynamic shared memory above the default 48 KiB needs an opt-in per kernel.
template <typename Kernel>
void allow_smem(Kernel kernel, std::size_t bytes) {
  if (bytes > (48u << 10))
    DIT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(bytes)));
}

AttnArgs attn_args(const Tensor& qkv, int heads, const Tensor& out, const Tensor& lse) {
  DIT_CHECK(qkv.shape.rank == 3 && heads > 0 && qkv.dim(2) % (3 * heads) == 0,
            "attention: qkv ", qkv.shape.str(), " is not (N, T, 3 * ", heads, " * E)");
  const i64 n = qkv.dim(0), t = qkv.dim(1), h = heads, e = qkv.dim(2) / (3 * heads);
  DIT_CHECK(out.numel() == n * t * h * e && lse.numel() == n * h * t, "attention: out ",
            out.shape.str(), " or lse ", lse.shape.str(), " does not match qkv ", qkv.shape.str());
  cuda::check_on_device(qkv, "attention qkv");
  cuda::check_on_device(out, "attention out");
  cuda::same_dtype(qkv, out, "attention out");
  cuda::check_f32(lse, "attention lse");
  DIT_CHECK(n * h <= 0x7fffffff && (t + kBlockRows - 1) / kBlockRows <= 65535,
            "attention: ", n * h, " (sample, head) pairs of ", t, " tokens exceed the grid");
  return AttnArgs{t, h, e, 3 * h * e, h * e, static_cast<int>(e | 1),
                  1.f / std::sqrt(static_cast<float>(e))};
}

dim3 attn_grid(const AttnArgs& a, i64 n) {
  return dim3(static_cast<unsigned>(n * a.h),
              static_cast<unsigned>((a.t + kBlockRows - 1) / kBlockRows));
}

}  // namespace

void CudaBackend::attention_fwd(const Tensor& qkv, int heads, const Tensor& out, const Tensor& lse) {
  const AttnArgs a = attn_args(qkv, heads, out, lse);
  const i64 n = qkv.dim(0);
  if (n == 0 || a.t == 0) return;
  const cuda::SdpaProblem problem{n, a.t, a.h, a.e, qkv.dtype, cuda::AttnDir::Forward};
  const cuda::SdpaPointers ptrs{qkv.data, out.data, lse.data, nullptr, nullptr};
  if (const cuda::SdpaPlan* plan = cudnn_attention_->plan(problem, ptrs)) {
    if (cudnn_attention_->run(*plan, ptrs, scratch(cudnn_attention_->workspace_bytes(*plan)))) return;
  }
  if (cudnn_attention_->path() != AttentionPath::Kernel)
    return composed_->forward(*this, qkv, heads, out, lse);
  const std::size_t smem = (2 * kTile * a.lds + kBlockRows * a.e) * sizeof(float);
  cuda::dispatch_float(qkv.dtype, "attention_fwd", [&](auto tag) {
    using T = decltype(tag);
    dispatch_head_chunks(a.e, [&](auto chunks) {
      constexpr int C = decltype(chunks)::value;
      allow_smem(attn_fwd_kernel<T, C>, smem);
      attn_fwd_kernel<T, C><<<attn_grid(a, n), kWarps * 32, smem, stream_>>>(
          qkv.as<T>(), out.as<T>(), lse.as<float>(), a);
      DIT_CUDA_LAUNCH_CHECK();
    });
  });
}

void CudaBackend::attention_bwd(const Tensor& qkv, const Tensor& out, const Tensor& lse,
                                const Tensor& dout, int heads, const Tensor& dqkv) {
  const AttnArgs a = attn_args(qkv, heads, out, lse);
  DIT_CHECK(dout.numel() == out.numel() && dqkv.numel() == qkv.numel(), "attention_bwd: dout ",
            dout.shape.str(), " / dqkv ", dqkv.shape.str(), " do not match out / qkv");
  cuda::check_on_device(dout, "attention dout");
  cuda::check_on_device(dqkv, "attention dqkv");
  cuda::same_dtype(qkv, dout, "attention dout");
  cuda::same_dtype(qkv, dqkv, "attention dqkv");
  const i64 n = qkv.dim(0);
  if (n == 0 || a.t == 0) return;
  const cuda::SdpaProblem problem{n, a.t, a.h, a.e, qkv.dtype, cuda::AttnDir::Backward};
  const cuda::SdpaPointers ptrs{qkv.data, out.data, lse.data, dout.data, dqkv.data};
  if (const cuda::SdpaPlan* plan = cudnn_attention_->plan(problem, ptrs)) {
    if (cudnn_attention_->run(*plan, ptrs, scratch(cudnn_attention_->workspace_bytes(*plan)))) return;
  }
  if (cudnn_attention_->path() != AttentionPath::Kernel)
    return composed_->backward(*this, qkv, out, lse, dout, heads, dqkv);
  auto* delta = static_cast<float*>(scratch(static_cast<std::size_t>(n * a.h * a.t) * sizeof(float)));
  const std::size_t smem_dq = (2 * kTile * a.lds + 2 * kBlockRows * a.e) * sizeof(float);
  const std::size_t smem_dkv = (2 * kBlockRows * a.e + 2 * kTile * a.lds + 2 * kTile) * sizeof(float);
  cuda::dispatch_float(qkv.dtype, "attention_bwd", [&](auto tag) {
    using T = decltype(tag);
    dispatch_head_chunks(a.e, [&](auto chunks) {
      constexpr int C = decltype(chunks)::value;
      allow_smem(attn_bwd_dq_kernel<T, C>, smem_dq);
      attn_bwd_dq_kernel<T, C><<<attn_grid(a, n), kWarps * 32, smem_dq, stream_>>>(
          qkv.as<T>(), out.as<T>(), lse.as<float>(), dout.as<T>(), dqkv.as<T>(), delta, a);
      DIT_CUDA_LAUNCH_CHECK();
      allow_smem(attn_bwd_dkv_kernel<T, C>, smem_dkv);
      attn_bwd_dkv_kernel<T, C><<<attn_grid(a, n), kWarps * 32, smem_dkv, stream_>>>(
          qkv.as<T>(), lse.as<float>(), delta, dout.as<T>(), dqkv.as<T>(), a);
      DIT_CUDA_LAUNCH_CHECK();
    });
  });
}

}  // namespace dit
