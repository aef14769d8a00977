// CUDA backend: adaLN (LayerNorm fused with modulate), gate-residual and row sums. Per-token work
// runs one warp per row; reductions over tokens (the modulation gradients, bias gradients) run
// 32 columns x 8 row lanes per block and combine in a fixed order, so results are bitwise
// reproducible run to run (no atomics).
#include <algorithm>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_backend.h"

namespace dit {

using cuda::Chunk;
using cuda::i64;
using cuda::from_f32;
using cuda::to_f32;

namespace {

constexpr int kRowWarps = 8;  // rows (warps) per block of the per-row kernels
constexpr int kColLanes = 8;  // row lanes per block of the column reductions

// y = modulate((x - mean) * rstd, shift, scale) per row of D; the statistics in two passes
// (mean, then the centred sum of squares) as the CPU does, in fp32.
template <typename T>
__global__ void ln_modulate_fwd_kernel(const T* x, Chunk<const T> shift, Chunk<const T> scale,
                                       float eps, T* y, float* mean, float* rstd, i64 rows,
                                       i64 t, i64 d) {
  const i64 row = static_cast<i64>(blockIdx.x) * kRowWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const T* xr = x + row * d;
  float s = 0.f;
  for (i64 i = lane; i < d; i += 32) s += to_f32(xr[i]);
  const float mu = cuda::warp_sum(s) / static_cast<float>(d);
  float v = 0.f;
  for (i64 i = lane; i < d; i += 32) {
    const float c = to_f32(xr[i]) - mu;
    v += c * c;
  }
  const float r = 1.f / sqrtf(cuda::warp_sum(v) / static_cast<float>(d) + eps);
  const i64 n = row / t;
  const T* sh = shift.base + n * shift.ld + shift.offset;
  const T* sc = scale.base + n * scale.ld + scale.offset;
  T* yr = y + row * d;
  for (i64 i = lane; i < d; i += 32)
    yr[i] = from_f32<T>(math::modulate((to_f32(xr[i]) - mu) * r, to_f32(sh[i]), to_f32(sc[i])));
  if (lane == 0) {
    mean[row] = mu;
    rstd[row] = r;
  }
}

// dx = rstd (g - mean(g) - xn mean(g xn)), g = dy (1 + scale), per row.
template <typename T>
__global__ void ln_modulate_bwd_dx_kernel(const T* dy, const T* x, const float* mean,
                                          const float* rstd, Chunk<const T> scale, T* dx,
                                          bool accumulate, i64 rows, i64 t, i64 d) {
  const i64 row = static_cast<i64>(blockIdx.x) * kRowWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const T* xr = x + row * d;
  const T* dyr = dy + row * d;
  const T* sc = scale.base + (row / t) * scale.ld + scale.offset;
  const float m = mean[row], r = rstd[row];
  float sg = 0.f, sgx = 0.f;
  for (i64 i = lane; i < d; i += 32) {
    const float g = to_f32(dyr[i]) * (1.f + to_f32(sc[i]));
    sg += g;
    sgx += g * (to_f32(xr[i]) - m) * r;
  }
  const float mg = cuda::warp_sum(sg) / static_cast<float>(d);
  const float mgx = cuda::warp_sum(sgx) / static_cast<float>(d);
  T* dxr = dx + row * d;
  for (i64 i = lane; i < d; i += 32) {
    const float xn = (to_f32(xr[i]) - m) * r;
    const float v = r * (to_f32(dyr[i]) * (1.f + to_f32(sc[i])) - mg - xn * mgx);
    dxr[i] = from_f32<T>(accumulate ? to_f32(dxr[i]) + v : v);
  }
}

// Sums partial[ly][lx] over ly into lane ly == 0 in a fixed order; returns it (valid there).
__device__ __forceinline__ float column_total(float (*partial)[33], float v) {
  partial[threadIdx.y][threadIdx.x] = v;
  __syncthreads();
  float s = 0.f;
  if (threadIdx.y == 0)
    for (int k = 0; k < kColLanes; ++k) s += partial[k][threadIdx.x];
  __syncthreads();
  return s;
}

// dshift[n, i] = sum_t dy;  dscale[n, i] = sum_t dy * xn.  Grid (D / 32, N).
template <typename T>
__global__ void ln_modulate_bwd_mod_kernel(const T* dy, const T* x, const float* mean,
                                           const float* rstd, Chunk<T> dshift, Chunk<T> dscale,
                                           i64 t, i64 d) {
  __shared__ float partial[kColLanes][33];
  const i64 i = static_cast<i64>(blockIdx.x) * 32 + threadIdx.x, n = blockIdx.y;
  float sh = 0.f, sc = 0.f;
  if (i < d)
    for (i64 tt = threadIdx.y; tt < t; tt += kColLanes) {
      const i64 row = n * t + tt;
      const float g = to_f32(dy[row * d + i]);
      sh += g;
      sc += g * (to_f32(x[row * d + i]) - mean[row]) * rstd[row];
    }
  sh = column_total(partial, sh);
  sc = column_total(partial, sc);
  if (threadIdx.y == 0 && i < d) {
    dshift.base[n * dshift.ld + dshift.offset + i] = from_f32<T>(sh);
    dscale.base[n * dscale.ld + dscale.offset + i] = from_f32<T>(sc);
  }
}

template <typename T>
__global__ void gate_residual_fwd_kernel(T* x, const T* h, Chunk<const T> gate, i64 total, i64 t,
                                         i64 d) {
  for (i64 o = cuda::global_thread(); o < total; o += cuda::grid_stride()) {
    const i64 i = o % d, n = o / (t * d);
    const float g = to_f32(gate.base[n * gate.ld + gate.offset + i]);
    x[o] = from_f32<T>(to_f32(x[o]) + g * to_f32(h[o]));
  }
}

// dh = gate * dx and dgate[n, i] = sum_t dx * h in one pass.  Grid (D / 32, N).
template <typename T>
__global__ void gate_residual_bwd_kernel(const T* dx, const T* h, Chunk<const T> gate, T* dh,
                                         Chunk<T> dgate, i64 t, i64 d) {
  __shared__ float partial[kColLanes][33];
  const i64 i = static_cast<i64>(blockIdx.x) * 32 + threadIdx.x, n = blockIdx.y;
  float s = 0.f;
  if (i < d) {
    const float g = to_f32(gate.base[n * gate.ld + gate.offset + i]);
    for (i64 tt = threadIdx.y; tt < t; tt += kColLanes) {
      const i64 o = (n * t + tt) * d + i;
      const float dxv = to_f32(dx[o]);
      dh[o] = from_f32<T>(g * dxv);
      s += dxv * to_f32(h[o]);
    }
  }
  s = column_total(partial, s);
  if (threadIdx.y == 0 && i < d) dgate.base[n * dgate.ld + dgate.offset + i] = from_f32<T>(s);
}

// Column sums of the rows [split * per, (split + 1) * per) of x (rows, l): grid (l / 32, splits).
// With one split the result goes straight to out; otherwise to partial[split][l].
template <typename T, typename O>
__global__ void sum_rows_kernel(const T* x, i64 rows, i64 l, i64 per, O* out, bool accumulate) {
  __shared__ float partial[kColLanes][33];
  const i64 i = static_cast<i64>(blockIdx.x) * 32 + threadIdx.x;
  const i64 r0 = blockIdx.y * per, r1 = r0 + per < rows ? r0 + per : rows;
  float s = 0.f;
  if (i < l)
    for (i64 r = r0 + threadIdx.y; r < r1; r += kColLanes) s += to_f32(x[r * l + i]);
  s = column_total(partial, s);
  if (threadIdx.y == 0 && i < l) {
    O* o = out + static_cast<i64>(blockIdx.y) * l + i;
    *o = from_f32<O>(accumulate ? to_f32(*o) + s : s);
  }
}

// out[i] (+)= sum over splits of partial[split][i], in split order.
template <typename O>
__global__ void sum_splits_kernel(const float* partial, i64 splits, i64 l, O* out, bool accumulate) {
  for (i64 i = cuda::global_thread(); i < l; i += cuda::grid_stride()) {
    float s = 0.f;
    for (i64 k = 0; k < splits; ++k) s += partial[k * l + i];
    out[i] = from_f32<O>(accumulate ? to_f32(out[i]) + s : s);
  }
}

int row_blocks(i64 rows) { return static_cast<int>((rows + kRowWarps - 1) / kRowWarps); }

}  // namespace

void CudaBackend::ln_modulate_fwd(const Tensor& x, const ModChunk& shift, const ModChunk& scale,
                                  float eps, const Tensor& y, const Tensor& mean,
                                  const Tensor& rstd) {
  const cuda::TokenGeom g = cuda::token_geom(x, shift, "ln_modulate_fwd");
  cuda::token_geom(x, scale, "ln_modulate_fwd");
  cuda::same_numel(x, y, "ln_modulate_fwd y");
  DIT_CHECK(mean.numel() == g.n * g.t && rstd.numel() == g.n * g.t,
            "ln_modulate_fwd: mean/rstd need N*T = ", g.n * g.t, " elements");
  cuda::check_on_device(x, "ln x");
  cuda::check_on_device(y, "ln y");
  cuda::same_dtype(x, y, "ln_modulate_fwd y");
  cuda::check_f32(mean, "ln mean");
  cuda::check_f32(rstd, "ln rstd");
  const i64 rows = g.n * g.t;
  if (rows == 0 || g.d == 0) return;
  cuda::dispatch_float(x.dtype, "ln_modulate_fwd", [&](auto tag) {
    using T = decltype(tag);
    ln_modulate_fwd_kernel<T><<<row_blocks(rows), kRowWarps * 32, 0, stream_>>>(
        x.as<T>(), cuda::chunk_of<const T>(shift, g.d), cuda::chunk_of<const T>(scale, g.d), eps,
        y.as<T>(), mean.as<float>(), rstd.as<float>(), rows, g.t, g.d);
    DIT_CUDA_LAUNCH_CHECK();
  });
}

void CudaBackend::ln_modulate_bwd(const Tensor& dy, const Tensor& x, const Tensor& mean,
                                  const Tensor& rstd, const ModChunk& scale, const Tensor& dx,
                                  Accumulate acc, const ModChunk& dshift,
                                  const ModChunk& dscale) {
  const cuda::TokenGeom g = cuda::token_geom(x, scale, "ln_modulate_bwd");
  cuda::token_geom(x, dshift, "ln_modulate_bwd");
  cuda::token_geom(x, dscale, "ln_modulate_bwd");
  cuda::same_numel(x, dy, "ln_modulate_bwd dy");
  cuda::same_numel(x, dx, "ln_modulate_bwd dx");
  DIT_CHECK(mean.numel() == g.n * g.t && rstd.numel() == g.n * g.t,
            "ln_modulate_bwd: mean/rstd need N*T = ", g.n * g.t, " elements");
  for (const Tensor* t : {&dy, &x, &dx}) cuda::check_on_device(*t, "ln_modulate_bwd");
  cuda::same_dtype(x, dy, "ln_modulate_bwd dy");
  cuda::same_dtype(x, dx, "ln_modulate_bwd dx");
  cuda::check_f32(mean, "ln mean");
  cuda::check_f32(rstd, "ln rstd");
  const i64 rows = g.n * g.t;
  if (g.n == 0 || g.d == 0) return;
  cuda::dispatch_float(x.dtype, "ln_modulate_bwd", [&](auto tag) {
    using T = decltype(tag);
    if (rows > 0) {
      ln_modulate_bwd_dx_kernel<T><<<row_blocks(rows), kRowWarps * 32, 0, stream_>>>(
          dy.as<T>(), x.as<T>(), mean.as<float>(), rstd.as<float>(),
          cuda::chunk_of<const T>(scale, g.d), dx.as<T>(), acc == Accumulate::Add, rows, g.t, g.d);
      DIT_CUDA_LAUNCH_CHECK();
    }
    const dim3 grid(static_cast<unsigned>((g.d + 31) / 32), static_cast<unsigned>(g.n));
    ln_modulate_bwd_mod_kernel<T><<<grid, dim3(32, kColLanes), 0, stream_>>>(
        dy.as<T>(), x.as<T>(), mean.as<float>(), rstd.as<float>(), cuda::chunk_of<T>(dshift, g.d),
        cuda::chunk_of<T>(dscale, g.d), g.t, g.d);
    DIT_CUDA_LAUNCH_CHECK();
  });
}

void CudaBackend::gate_residual_fwd(const Tensor& x, const Tensor& h, const ModChunk& gate) {
  const cuda::TokenGeom g = cuda::token_geom(x, gate, "gate_residual_fwd");
  cuda::same_numel(x, h, "gate_residual_fwd");
  cuda::check_on_device(x, "gate x");
  cuda::check_on_device(h, "gate h");
  cuda::same_dtype(x, h, "gate_residual_fwd");
  const i64 total = x.numel();
  if (total == 0) return;
  cuda::dispatch_float(x.dtype, "gate_residual_fwd", [&](auto tag) {
    using T = decltype(tag);
    gate_residual_fwd_kernel<T><<<cuda::grid_for(total), cuda::kThreads, 0, stream_>>>(
        x.as<T>(), h.as<T>(), cuda::chunk_of<const T>(gate, g.d), total, g.t, g.d);
    DIT_CUDA_LAUNCH_CHECK();
  });
}

void CudaBackend::gate_residual_bwd(const Tensor& dx, const Tensor& h, const ModChunk& gate,
                                    const Tensor& dh, const ModChunk& dgate) {
  const cuda::TokenGeom g = cuda::token_geom(dx, gate, "gate_residual_bwd");
  cuda::token_geom(dx, dgate, "gate_residual_bwd");
  cuda::same_numel(dx, h, "gate_residual_bwd h");
  cuda::same_numel(dx, dh, "gate_residual_bwd dh");
  for (const Tensor* t : {&dx, &h, &dh}) cuda::check_on_device(*t, "gate_residual_bwd");
  cuda::same_dtype(dx, h, "gate_residual_bwd h");
  cuda::same_dtype(dx, dh, "gate_residual_bwd dh");
  if (g.n == 0 || g.d == 0) return;
  cuda::dispatch_float(dx.dtype, "gate_residual_bwd", [&](auto tag) {
    using T = decltype(tag);
    const dim3 grid(static_cast<unsigned>((g.d + 31) / 32), static_cast<unsigned>(g.n));
    gate_residual_bwd_kernel<T><<<grid, dim3(32, kColLanes), 0, stream_>>>(
        dx.as<T>(), h.as<T>(), cuda::chunk_of<const T>(gate, g.d), dh.as<T>(),
        cuda::chunk_of<T>(dgate, g.d), g.t, g.d);
    DIT_CUDA_LAUNCH_CHECK();
  });
}

void CudaBackend::sum_rows(const Tensor& x, const Tensor& out, Accumulate acc) {
  const i64 l = out.numel();
  DIT_CHECK(l > 0 && x.numel() % l == 0, "sum_rows: ", out.shape.str(), " does not tile ",
            x.shape.str());
  cuda::check_on_device(x, "sum_rows x");
  cuda::check_on_device(out, "sum_rows out");
  const i64 rows = x.numel() / l;
  const bool add = acc == Accumulate::Add;
  // Split the rows so that about two blocks per SM are busy; each split sums >= 64 rows.
  const i64 col_blocks = (l + 31) / 32;
  i64 splits = std::max<i64>(1, std::min<i64>((rows + 63) / 64, 2 * num_sms_ / col_blocks));
  splits = std::min<i64>(splits, 65535);
  const i64 per = (rows + splits - 1) / splits;
  float* partial = splits > 1 ? static_cast<float*>(scratch(splits * l * sizeof(float))) : nullptr;
  cuda::dispatch_float(x.dtype, "sum_rows x", [&](auto tx) {
    using T = decltype(tx);
    cuda::dispatch_float(out.dtype, "sum_rows out", [&](auto to) {
      using O = decltype(to);
      const dim3 grid(static_cast<unsigned>(col_blocks), static_cast<unsigned>(splits));
      if (splits == 1) {
        sum_rows_kernel<T, O><<<grid, dim3(32, kColLanes), 0, stream_>>>(x.as<T>(), rows, l, per,
                                                                          out.as<O>(), add);
        DIT_CUDA_LAUNCH_CHECK();
        return;
      }
      sum_rows_kernel<T, float><<<grid, dim3(32, kColLanes), 0, stream_>>>(x.as<T>(), rows, l,
                                                                            per, partial, false);
      DIT_CUDA_LAUNCH_CHECK();
      sum_splits_kernel<O><<<cuda::grid_for(l), cuda::kThreads, 0, stream_>>>(partial, splits, l,
                                                                               out.as<O>(), add);
      DIT_CUDA_LAUNCH_CHECK();
    });
  });
}

}  // namespace dit
