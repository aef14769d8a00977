// CUDA backend: the primitives of LightningDiT's block variants (SwiGLU gate, RMSNorm with
// modulation, per-head q/k norm, 2-D RoPE), with math.h's formulas. Per-token norms run one warp
// per row; every reduction over rows sums in a fixed order (no atomics), so results are bitwise
// reproducible run to run.
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_backend.h"

namespace dit {

using cuda::Chunk;
using cuda::from_f32;
using cuda::i64;
using cuda::to_f32;

namespace {

constexpr int kRowWarps = 8;

int row_blocks(i64 rows) { return static_cast<int>((rows + kRowWarps - 1) / kRowWarps); }

template <typename T>
__global__ void swiglu_fwd_kernel(const T* x12, T* h, i64 total, i64 f) {
  for (i64 o = cuda::global_thread(); o < total; o += cuda::grid_stride()) {
    const i64 r = o / f, i = o % f;
    h[o] = from_f32<T>(math::SiluGate::forward(to_f32(x12[r * 2 * f + i]), to_f32(x12[r * 2 * f + f + i])));
  }
}

template <typename T>
__global__ void swiglu_bwd_kernel(const T* x12, const T* dh, T* dx12, i64 total, i64 f) {
  for (i64 o = cuda::global_thread(); o < total; o += cuda::grid_stride()) {
    const i64 a = (o / f) * 2 * f + o % f;
    float da, db;
    math::SiluGate::backward(to_f32(x12[a]), to_f32(x12[a + f]), to_f32(dh[o]), da, db);
    dx12[a] = from_f32<T>(da);
    dx12[a + f] = from_f32<T>(db);
  }
}

// y = modulate(x rstd w, shift, scale) per row of D.
template <typename T>
__global__ void rms_fwd_kernel(const T* x, const T* w, Chunk<const T> shift, Chunk<const T> scale,
                               float eps, T* y, float* rstd, i64 rows, i64 t, i64 d) {
  const i64 row = static_cast<i64>(blockIdx.x) * kRowWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const T* xr = x + row * d;
  float s = 0.f;
  for (i64 i = lane; i < d; i += 32) s += to_f32(xr[i]) * to_f32(xr[i]);
  const float r = math::norm_rstd(cuda::warp_sum(s) / static_cast<float>(d), eps);
  const i64 n = row / t;
  const T* sh = shift.base + n * shift.ld + shift.offset;
  const T* sc = scale.base + n * scale.ld + scale.offset;
  for (i64 i = lane; i < d; i += 32) {
    const float wi = w ? to_f32(w[i]) : 1.f;
    y[row * d + i] = from_f32<T>(math::modulate(to_f32(xr[i]) * r * wi, to_f32(sh[i]), to_f32(sc[i])));
  }
  if (lane == 0) rstd[row] = r;
}

// dx = rstd (g - xhat mean(g xhat)), g = dy (1 + scale) w, per row.
template <typename T>
__global__ void rms_bwd_dx_kernel(const T* dy, const T* x, const float* rstd, const T* w,
                                  Chunk<const T> scale, T* dx, bool accumulate, i64 rows, i64 t,
                                  i64 d) {
  const i64 row = static_cast<i64>(blockIdx.x) * kRowWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const T* sc = scale.base + (row / t) * scale.ld + scale.offset;
  const float r = rstd[row];
  float sgx = 0.f;
  for (i64 i = lane; i < d; i += 32)
    sgx += to_f32(dy[row * d + i]) * (1.f + to_f32(sc[i])) * (w ? to_f32(w[i]) : 1.f) *
           to_f32(x[row * d + i]) * r;
  const float mgx = cuda::warp_sum(sgx) / static_cast<float>(d);
  for (i64 i = lane; i < d; i += 32) {
    const float g = to_f32(dy[row * d + i]) * (1.f + to_f32(sc[i])) * (w ? to_f32(w[i]) : 1.f);
    const float v = math::norm_dx(g, to_f32(x[row * d + i]) * r, r, 0.f, mgx, false);
    dx[row * d + i] = from_f32<T>(accumulate ? to_f32(dx[row * d + i]) + v : v);
  }
}

// Per column i: dshift[n, i] = sum_t dy, dscale[n, i] = sum_t dy xhat w, and (one thread per
// column over every sample, in order) dweight[i] += sum dy (1 + scale) xhat.
template <typename T>
__global__ void rms_bwd_cols_kernel(const T* dy, const T* x, const float* rstd, const T* w,
                                    Chunk<const T> scale, Chunk<T> dshift, Chunk<T> dscale,
                                    float* dweight, i64 n_samples, i64 t, i64 d) {
  const i64 i = cuda::global_thread();
  if (i >= d) return;
  const float wi = w ? to_f32(w[i]) : 1.f;
  float dw = 0.f;
  for (i64 n = 0; n < n_samples; ++n) {
    const float sc = to_f32(scale.base[n * scale.ld + scale.offset + i]);
    float sh = 0.f, ss = 0.f;
    for (i64 tt = 0; tt < t; ++tt) {
      const i64 row = n * t + tt;
      const float g = to_f32(dy[row * d + i]), xh = to_f32(x[row * d + i]) * rstd[row];
      sh += g;
      ss += g * xh * wi;
      dw += g * (1.f + sc) * xh;
    }
    dshift.base[n * dshift.ld + dshift.offset + i] = from_f32<T>(sh);
    dscale.base[n * dscale.ld + dscale.offset + i] = from_f32<T>(ss);
  }
  if (dweight) dweight[i] += dw;
}

struct HeadGeom {
  i64 rows, heads, e;
};

// One thread per (row, part q|k, head): the head's statistics and normalized values; v copied
// by the threads of part 0.
template <typename T>
__global__ void head_norm_fwd_kernel(const T* x, T* y, const T* qw, const T* qb, const T* kw,
                                     const T* kb, bool centered, float eps, float* mean,
                                     float* rstd, HeadGeom g) {
  const i64 total = g.rows * 2 * g.heads, len = 3 * g.heads * g.e;
  for (i64 o = cuda::global_thread(); o < total; o += cuda::grid_stride()) {
    const i64 row = o / (2 * g.heads), part = (o / g.heads) % 2, h = o % g.heads;
    const T* xr = x + row * len + (part * g.heads + h) * g.e;
    T* yr = y + row * len + (part * g.heads + h) * g.e;
    const T* w = part == 0 ? qw : kw;
    const T* b = part == 0 ? qb : kb;
    float s = 0.f;
    if (centered)
      for (i64 i = 0; i < g.e; ++i) s += to_f32(xr[i]);
    const float mu = s / static_cast<float>(g.e);
    float v = 0.f;
    for (i64 i = 0; i < g.e; ++i) v += (to_f32(xr[i]) - mu) * (to_f32(xr[i]) - mu);
    const float r = math::norm_rstd(v / static_cast<float>(g.e), eps);
    mean[o] = mu;
    rstd[o] = r;
    for (i64 i = 0; i < g.e; ++i)
      yr[i] = from_f32<T>((to_f32(xr[i]) - mu) * r * to_f32(w[i]) + (b ? to_f32(b[i]) : 0.f));
    if (part == 0 && x != y) {
      const T* xv = x + row * len + (2 * g.heads + h) * g.e;
      T* yv = y + row * len + (2 * g.heads + h) * g.e;
      for (i64 i = 0; i < g.e; ++i) yv[i] = xv[i];
    }
  }
}

template <typename T>
__global__ void head_norm_bwd_dx_kernel(const T* dy, const T* x, const float* mean,
                                        const float* rstd, const T* qw, const T* kw, bool centered,
                                        T* dx, HeadGeom g) {
  const i64 total = g.rows * 2 * g.heads, len = 3 * g.heads * g.e;
  for (i64 o = cuda::global_thread(); o < total; o += cuda::grid_stride()) {
    const i64 row = o / (2 * g.heads), part = (o / g.heads) % 2, h = o % g.heads;
    const i64 off = row * len + (part * g.heads + h) * g.e;
    const T* w = part == 0 ? qw : kw;
    const float mu = mean[o], r = rstd[o];
    float sg = 0.f, sgx = 0.f;
    for (i64 i = 0; i < g.e; ++i) {
      const float gi = to_f32(dy[off + i]) * to_f32(w[i]);
      sg += gi;
      sgx += gi * (to_f32(x[off + i]) - mu) * r;
    }
    const float mg = sg / static_cast<float>(g.e), mgx = sgx / static_cast<float>(g.e);
    // Every dy of the head is read before dx (which may be dy) is written.
    for (i64 i = 0; i < g.e; ++i)
      dx[off + i] = from_f32<T>(math::norm_dx(to_f32(dy[off + i]) * to_f32(w[i]),
                                              (to_f32(x[off + i]) - mu) * r, r, mg, mgx, centered));
    if (part == 0 && dx != dy) {
      const i64 v = row * len + (2 * g.heads + h) * g.e;
      for (i64 i = 0; i < g.e; ++i) dx[v + i] = dy[v + i];
    }
  }
}

// One block per (part, i): dw[i] += sum over rows and heads of dy xhat, db[i] += sum dy.
template <typename T>
__global__ void head_norm_bwd_w_kernel(const T* dy, const T* x, const float* mean,
                                       const float* rstd, float* dqw, float* dqb, float* dkw,
                                       float* dkb, HeadGeom g) {
  const i64 part = blockIdx.x / g.e, i = blockIdx.x % g.e, len = 3 * g.heads * g.e;
  double sw = 0, sb = 0;
  for (i64 k = threadIdx.x; k < g.rows * g.heads; k += blockDim.x) {
    const i64 row = k / g.heads, h = k % g.heads, stat = row * 2 * g.heads + part * g.heads + h;
    const i64 off = row * len + (part * g.heads + h) * g.e + i;
    const float d = to_f32(dy[off]);
    sw += static_cast<double>(d) * (to_f32(x[off]) - mean[stat]) * rstd[stat];
    sb += d;
  }
  sw = cuda::block_sum(sw);
  sb = cuda::block_sum(sb);
  if (threadIdx.x != 0) return;
  float* dw = part == 0 ? dqw : dkw;
  float* db = part == 0 ? dqb : dkb;
  dw[i] += static_cast<float>(sw);
  if (db) db[i] += static_cast<float>(sb);
}

// One thread per (row, q|k head, pair); the threads of q's heads also copy v's pair when out != in.
template <typename T>
__global__ void rope_kernel(const T* x, T* y, float sign, i64 rows, i64 t, int heads, int e,
                            int grid) {
  const int half = e / 2;
  const i64 total = rows * 2 * heads * half, len = 3 * static_cast<i64>(heads) * e;
  for (i64 o = cuda::global_thread(); o < total; o += cuda::grid_stride()) {
    const i64 row = o / (2 * heads * half);
    const int hh = static_cast<int>((o / half) % (2 * heads)), q = static_cast<int>(o % half);
    const int tok = static_cast<int>(row % t);
    const float a = math::rope_angle(tok, q, grid, e);
    const i64 i = row * len + static_cast<i64>(hh) * e + 2 * q;
    float y0, y1;
    math::rope_rotate(to_f32(x[i]), to_f32(x[i + 1]), cosf(a), sign * sinf(a), y0, y1);
    y[i] = from_f32<T>(y0);
    y[i + 1] = from_f32<T>(y1);
    if (hh < heads && x != y) {
      const i64 v = row * len + static_cast<i64>(2 * heads + hh) * e + 2 * q;
      y[v] = x[v];
      y[v + 1] = x[v + 1];
    }
  }
}

HeadGeom head_geom(const Tensor& qkv, int heads, const char* what) {
  DIT_CHECK(qkv.shape.rank == 3 && heads > 0 && qkv.dim(2) % (3 * heads) == 0, what, ": qkv ",
            qkv.shape.str(), " is not (N, T, 3 * ", heads, " heads * E)");
  cuda::check_on_device(qkv, what);
  return {qkv.dim(0) * qkv.dim(1), heads, qkv.dim(2) / (3 * heads)};
}

template <typename T>
const T* optional(const Tensor& t) {
  return t.data ? t.as<const T>() : nullptr;
}
float* optional_f32(const Tensor& t, const char* what) {
  if (!t.data) return nullptr;
  cuda::check_f32(t, what);
  return t.as<float>();
}

}  // namespace

void CudaBackend::swiglu_fwd(const Tensor& x12, const Tensor& h) {
  const i64 f = h.dim(-1);
  DIT_CHECK(x12.numel() == 2 * h.numel() && x12.dim(-1) == 2 * f, "swiglu_fwd: x12 ",
            x12.shape.str(), " is not [x1 | x2] of h ", h.shape.str());
  cuda::same_dtype(x12, h, "swiglu_fwd");
  if (h.numel() == 0) return;
  cuda::dispatch_float(h.dtype, "swiglu_fwd", [&](auto tag) {
    using T = decltype(tag);
    swiglu_fwd_kernel<T><<<cuda::grid_for(h.numel()), cuda::kThreads, 0, stream_>>>(
        x12.as<const T>(), h.as<T>(), h.numel(), f);
    DIT_CUDA_LAUNCH_CHECK();
  });
}

void CudaBackend::swiglu_bwd(const Tensor& x12, const Tensor& dh, const Tensor& dx12) {
  const i64 f = dh.dim(-1);
  DIT_CHECK(x12.numel() == 2 * dh.numel() && x12.dim(-1) == 2 * f && dx12.numel() == x12.numel(),
            "swiglu_bwd: x12 ", x12.shape.str(), " / dx12 ", dx12.shape.str(), " do not fit dh ",
            dh.shape.str());
  cuda::same_dtype(x12, dh, "swiglu_bwd");
  cuda::same_dtype(x12, dx12, "swiglu_bwd");
  if (dh.numel() == 0) return;
  cuda::dispatch_float(dh.dtype, "swiglu_bwd", [&](auto tag) {
    using T = decltype(tag);
    swiglu_bwd_kernel<T><<<cuda::grid_for(dh.numel()), cuda::kThreads, 0, stream_>>>(
        x12.as<const T>(), dh.as<const T>(), dx12.as<T>(), dh.numel(), f);
    DIT_CUDA_LAUNCH_CHECK();
  });
}

void CudaBackend::rms_modulate_fwd(const Tensor& x, const Tensor& weight, const ModChunk& shift,
                                   const ModChunk& scale, float eps, const Tensor& y,
                                   const Tensor& rstd) {
  const cuda::TokenGeom g = cuda::token_geom(x, shift, "rms_modulate_fwd");
  cuda::token_geom(x, scale, "rms_modulate_fwd");
  cuda::same_numel(x, y, "rms_modulate_fwd y");
  cuda::same_dtype(x, y, "rms_modulate_fwd y");
  DIT_CHECK(rstd.numel() == g.n * g.t && (!weight.data || weight.numel() == g.d),
            "rms_modulate_fwd: rstd needs N*T elements and weight D");
  if (weight.data) cuda::same_dtype(x, weight, "rms_modulate_fwd weight");
  cuda::check_f32(rstd, "rms rstd");
  const i64 rows = g.n * g.t;
  if (rows == 0 || g.d == 0) return;
  cuda::dispatch_float(x.dtype, "rms_modulate_fwd", [&](auto tag) {
    using T = decltype(tag);
    rms_fwd_kernel<T><<<row_blocks(rows), kRowWarps * 32, 0, stream_>>>(
        x.as<const T>(), optional<T>(weight), cuda::chunk_of<const T>(shift, g.d),
        cuda::chunk_of<const T>(scale, g.d), eps, y.as<T>(), rstd.as<float>(), rows, g.t, g.d);
    DIT_CUDA_LAUNCH_CHECK();
  });
}

void CudaBackend::rms_modulate_bwd(const Tensor& dy, const Tensor& x, const Tensor& rstd,
                                   const Tensor& weight, const ModChunk& scale, const Tensor& dx,
                                   Accumulate acc, const Tensor& dweight, const ModChunk& dshift,
                                   const ModChunk& dscale) {
  const cuda::TokenGeom g = cuda::token_geom(x, scale, "rms_modulate_bwd");
  cuda::token_geom(x, dshift, "rms_modulate_bwd");
  cuda::token_geom(x, dscale, "rms_modulate_bwd");
  cuda::same_numel(x, dy, "rms_modulate_bwd dy");
  cuda::same_numel(x, dx, "rms_modulate_bwd dx");
  cuda::same_dtype(x, dy, "rms_modulate_bwd dy");
  cuda::same_dtype(x, dx, "rms_modulate_bwd dx");
  cuda::check_f32(rstd, "rms rstd");
  float* dw = optional_f32(dweight, "rms dweight");
  const i64 rows = g.n * g.t;
  if (g.n == 0 || g.d == 0) return;
  cuda::dispatch_float(x.dtype, "rms_modulate_bwd", [&](auto tag) {
    using T = decltype(tag);
    // The column sums read dy before dx (which may not alias dy here) is written.
    rms_bwd_cols_kernel<T><<<cuda::grid_for(g.d), cuda::kThreads, 0, stream_>>>(
        dy.as<const T>(), x.as<const T>(), rstd.as<const float>(), optional<T>(weight),
        cuda::chunk_of<const T>(scale, g.d), cuda::chunk_of<T>(dshift, g.d),
        cuda::chunk_of<T>(dscale, g.d), dw, g.n, g.t, g.d);
    DIT_CUDA_LAUNCH_CHECK();
    if (rows > 0) {
      rms_bwd_dx_kernel<T><<<row_blocks(rows), kRowWarps * 32, 0, stream_>>>(
          dy.as<const T>(), x.as<const T>(), rstd.as<const float>(), optional<T>(weight),
          cuda::chunk_of<const T>(scale, g.d), dx.as<T>(), acc == Accumulate::Add, rows, g.t, g.d);
      DIT_CUDA_LAUNCH_CHECK();
    }
  });
}

void CudaBackend::head_norm_fwd(const Tensor& qkv, int heads, const HeadNorm& p, const Tensor& out,
                                const Tensor& mean, const Tensor& rstd) {
  const HeadGeom g = head_geom(qkv, heads, "head_norm_fwd");
  cuda::same_numel(qkv, out, "head_norm_fwd out");
  cuda::same_dtype(qkv, out, "head_norm_fwd out");
  DIT_CHECK(mean.numel() == g.rows * 2 * g.heads && rstd.numel() == mean.numel(),
            "head_norm_fwd: mean/rstd need N*T*2*H elements");
  cuda::check_f32(mean, "head_norm mean");
  cuda::check_f32(rstd, "head_norm rstd");
  const bool ln = p.kind == HeadNormKind::LayerNorm;
  if (g.rows == 0) return;
  cuda::dispatch_float(qkv.dtype, "head_norm_fwd", [&](auto tag) {
    using T = decltype(tag);
    head_norm_fwd_kernel<T><<<cuda::grid_for(g.rows * 2 * g.heads), cuda::kThreads, 0, stream_>>>(
        qkv.as<const T>(), out.as<T>(), p.q_w.as<const T>(), ln ? optional<T>(p.q_b) : nullptr,
        p.k_w.as<const T>(), ln ? optional<T>(p.k_b) : nullptr, ln, p.eps, mean.as<float>(),
        rstd.as<float>(), g);
    DIT_CUDA_LAUNCH_CHECK();
  });
}

void CudaBackend::head_norm_bwd(const Tensor& dout, const Tensor& qkv, const Tensor& mean,
                                const Tensor& rstd, int heads, const HeadNorm& p,
                                const HeadNormGrads& gr, const Tensor& dqkv) {
  const HeadGeom g = head_geom(qkv, heads, "head_norm_bwd");
  cuda::same_numel(qkv, dout, "head_norm_bwd dout");
  cuda::same_numel(qkv, dqkv, "head_norm_bwd dqkv");
  cuda::same_dtype(qkv, dout, "head_norm_bwd dout");
  cuda::same_dtype(qkv, dqkv, "head_norm_bwd dqkv");
  cuda::check_f32(mean, "head_norm mean");
  cuda::check_f32(rstd, "head_norm rstd");
  const bool ln = p.kind == HeadNormKind::LayerNorm;
  float* dqw = optional_f32(gr.q_w, "q_norm weight grad");
  float* dkw = optional_f32(gr.k_w, "k_norm weight grad");
  float* dqb = ln ? optional_f32(gr.q_b, "q_norm bias grad") : nullptr;
  float* dkb = ln ? optional_f32(gr.k_b, "k_norm bias grad") : nullptr;
  if (g.rows == 0) return;
  cuda::dispatch_float(qkv.dtype, "head_norm_bwd", [&](auto tag) {
    using T = decltype(tag);
    // Weight grads first: they read dout, which dqkv may alias.
    head_norm_bwd_w_kernel<T><<<static_cast<unsigned>(2 * g.e), cuda::kThreads, 0, stream_>>>(
        dout.as<const T>(), qkv.as<const T>(), mean.as<const float>(), rstd.as<const float>(),
        dqw, dqb, dkw, dkb, g);
    DIT_CUDA_LAUNCH_CHECK();
    head_norm_bwd_dx_kernel<T><<<cuda::grid_for(g.rows * 2 * g.heads), cuda::kThreads, 0, stream_>>>(
        dout.as<const T>(), qkv.as<const T>(), mean.as<const float>(), rstd.as<const float>(),
        p.q_w.as<const T>(), p.k_w.as<const T>(), ln, dqkv.as<T>(), g);
    DIT_CUDA_LAUNCH_CHECK();
  });
}

namespace {
void rope_launch(cudaStream_t stream, const Tensor& in, int heads, int grid, const Tensor& out,
                 float sign, const char* what) {
  const HeadGeom g = head_geom(in, heads, what);
  cuda::same_numel(in, out, what);
  cuda::same_dtype(in, out, what);
  const i64 t = in.dim(1);
  DIT_CHECK(grid > 0 && t == static_cast<i64>(grid) * grid && g.e % 4 == 0, what, ": ", t,
            " tokens are not a ", grid, " x ", grid, " grid, or head dim ", g.e,
            " is not a multiple of 4");
  if (g.rows == 0) return;
  cuda::dispatch_float(in.dtype, what, [&](auto tag) {
    using T = decltype(tag);
    rope_kernel<T><<<cuda::grid_for(g.rows * 2 * heads * (g.e / 2)), cuda::kThreads, 0, stream>>>(
        in.as<const T>(), out.as<T>(), sign, g.rows, t, heads, static_cast<int>(g.e), grid);
    DIT_CUDA_LAUNCH_CHECK();
  });
}
}  // namespace

void CudaBackend::rope_fwd(const Tensor& qkv, int heads, int grid, const Tensor& out) {
  rope_launch(stream_, qkv, heads, grid, out, 1.f, "rope_fwd");
}

void CudaBackend::rope_bwd(const Tensor& dout, int heads, int grid, const Tensor& dqkv) {
  rope_launch(stream_, dout, heads, grid, dqkv, -1.f, "rope_bwd");
}

}  // namespace dit
