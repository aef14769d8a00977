// CPU backend: the primitives of the block variants (SwiGLU gate, RMSNorm with modulation, the
// per-head q/k norm, 2-D RoPE). The formulas are math.h's, shared with the CUDA kernels.
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/host_views.h"

namespace dit {

namespace {

using cpu::chunk_row;
using cpu::host_f32;
using cpu::token_geom;
using cpu::TokenGeom;

// Data of an optional operand (a norm without weight, a LayerNorm-only bias): nullptr if none.
float* optional_f32(const Tensor& t, const char* what) {
  return t.data == nullptr ? nullptr : host_f32(t, what);
}

// (rows, heads, E) of a packed qkv (N, T, 3*H*E).
struct QkvGeom {
  std::int64_t rows, heads, e;
};
QkvGeom qkv_geom(const Tensor& qkv, int heads, const char* what) {
  DIT_CHECK(qkv.shape.rank == 3 && heads > 0 && qkv.dim(2) % (3 * heads) == 0, what,
            ": qkv ", qkv.shape.str(), " is not (N, T, 3 * ", heads, " heads * E)");
  return {qkv.dim(0) * qkv.dim(1), heads, qkv.dim(2) / (3 * heads)};
}

}  // namespace

void CpuBackend::swiglu_fwd(const Tensor& x12, const Tensor& h) {
  const std::int64_t f = h.dim(-1), rows = h.numel() / f;
  DIT_CHECK(x12.numel() == 2 * h.numel() && x12.dim(-1) == 2 * f, "swiglu_fwd: x12 ",
            x12.shape.str(), " is not [x1 | x2] of h ", h.shape.str());
  const float* px = host_f32(x12, "swiglu x12");
  float* ph = host_f32(h, "swiglu h");
#pragma omp parallel for schedule(static) if (rows * f > 16384)
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t i = 0; i < f; ++i)
      ph[r * f + i] = math::SiluGate::forward(px[r * 2 * f + i], px[r * 2 * f + f + i]);
}

void CpuBackend::swiglu_bwd(const Tensor& x12, const Tensor& dh, const Tensor& dx12) {
  const std::int64_t f = dh.dim(-1), rows = dh.numel() / f;
  DIT_CHECK(x12.numel() == 2 * dh.numel() && x12.dim(-1) == 2 * f && dx12.numel() == x12.numel(),
            "swiglu_bwd: x12 ", x12.shape.str(), " / dx12 ", dx12.shape.str(), " do not fit dh ",
            dh.shape.str());
  const float* px = host_f32(x12, "swiglu x12");
  const float* pdh = host_f32(dh, "swiglu dh");
  float* pdx = host_f32(dx12, "swiglu dx12");
#pragma omp parallel for schedule(static) if (rows * f > 16384)
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t i = 0; i < f; ++i) {
      const std::int64_t a = r * 2 * f + i;
      float da, db;
      math::SiluGate::backward(px[a], px[a + f], pdh[r * f + i], da, db);
      pdx[a] = da;
      pdx[a + f] = db;
    }
}

void CpuBackend::rms_modulate_fwd(const Tensor& x, const Tensor& weight, const ModChunk& shift,
                                  const ModChunk& scale, float eps, const Tensor& y,
                                  const Tensor& rstd) {
  const TokenGeom g = token_geom(x, shift, "rms_modulate_fwd");
  token_geom(x, scale, "rms_modulate_fwd");
  DIT_CHECK(y.numel() == x.numel() && rstd.numel() == g.n * g.t &&
                (weight.data == nullptr || weight.numel() == g.d),
            "rms_modulate_fwd: y ", y.shape.str(), ", rstd ", rstd.shape.str(), " or weight ",
            weight.shape.str(), " do not fit x ", x.shape.str());
  const float* px = host_f32(x, "rms x");
  const float* pw = optional_f32(weight, "rms weight");
  float* py = host_f32(y, "rms y");
  float* pr = host_f32(rstd, "rms rstd");
#pragma omp parallel for schedule(static) if (g.n * g.t * g.d > 16384)
  for (std::int64_t row = 0; row < g.n * g.t; ++row) {
    const float* xr = px + row * g.d;
    double ss = 0;
    for (std::int64_t i = 0; i < g.d; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const float r = math::norm_rstd(ss / static_cast<double>(g.d), eps);
    pr[row] = r;
    const float* sh = chunk_row(shift, row / g.t, g.d);
    const float* sc = chunk_row(scale, row / g.t, g.d);
    for (std::int64_t i = 0; i < g.d; ++i)
      py[row * g.d + i] = math::modulate(xr[i] * r * (pw ? pw[i] : 1.f), sh[i], sc[i]);
  }
}

void CpuBackend::rms_modulate_bwd(const Tensor& dy, const Tensor& x, const Tensor& rstd,
                                  const Tensor& weight, const ModChunk& scale, const Tensor& dx,
                                  Accumulate acc, const Tensor& dweight, const ModChunk& dshift,
                                  const ModChunk& dscale) {
  const TokenGeom g = token_geom(x, scale, "rms_modulate_bwd");
  token_geom(x, dshift, "rms_modulate_bwd");
  token_geom(x, dscale, "rms_modulate_bwd");
  DIT_CHECK(dy.numel() == x.numel() && dx.numel() == x.numel() && rstd.numel() == g.n * g.t,
            "rms_modulate_bwd: dy/dx/rstd do not fit x ", x.shape.str());
  const float* pdy = host_f32(dy, "rms dy");
  const float* px = host_f32(x, "rms x");
  const float* pr = host_f32(rstd, "rms rstd");
  const float* pw = optional_f32(weight, "rms weight");
  float* pdx = host_f32(dx, "rms dx");
  float* pdw = optional_f32(dweight, "rms dweight");
  const std::int64_t d = g.d;
#pragma omp parallel for schedule(static) if (g.n * g.t * d > 16384)
  for (std::int64_t row = 0; row < g.n * g.t; ++row) {
    const float* sc = chunk_row(scale, row / g.t, d);
    const float r = pr[row];
    double sgx = 0;  // sum of g * xhat, g = dL/dxhat = dy (1 + scale) w
    for (std::int64_t i = 0; i < d; ++i) {
      const float gi = pdy[row * d + i] * (1.f + sc[i]) * (pw ? pw[i] : 1.f);
      sgx += static_cast<double>(gi) * px[row * d + i] * r;
    }
    const float mgx = static_cast<float>(sgx / static_cast<double>(d));
    for (std::int64_t i = 0; i < d; ++i) {
      const float gi = pdy[row * d + i] * (1.f + sc[i]) * (pw ? pw[i] : 1.f);
      const float v = math::norm_dx(gi, px[row * d + i] * r, r, 0.f, mgx, false);
      pdx[row * d + i] = acc == Accumulate::Add ? pdx[row * d + i] + v : v;
    }
  }
  // Reductions over tokens: dshift, dscale per sample; dweight over all rows.
  for (std::int64_t n = 0; n < g.n; ++n) {
    float* dsh = chunk_row(dshift, n, d);
    float* dsc = chunk_row(dscale, n, d);
    const float* sc = chunk_row(scale, n, d);
    for (std::int64_t i = 0; i < d; ++i) {
      double sh = 0, s = 0, w = 0;
      for (std::int64_t t = 0; t < g.t; ++t) {
        const std::int64_t row = n * g.t + t;
        const double xh = static_cast<double>(px[row * d + i]) * pr[row];
        const double gy = pdy[row * d + i];
        sh += gy;
        s += gy * xh * (pw ? pw[i] : 1.f);
        w += gy * (1.0 + sc[i]) * xh;
      }
      dsh[i] = static_cast<float>(sh);
      dsc[i] = static_cast<float>(s);
      if (pdw) pdw[i] += static_cast<float>(w);
    }
  }
}

void CpuBackend::head_norm_fwd(const Tensor& qkv, int heads, const HeadNorm& p, const Tensor& out,
                               const Tensor& mean, const Tensor& rstd) {
  const QkvGeom g = qkv_geom(qkv, heads, "head_norm_fwd");
  const std::int64_t e = g.e, row_len = 3 * g.heads * e;
  DIT_CHECK(out.numel() == qkv.numel() && mean.numel() == g.rows * 2 * g.heads &&
                rstd.numel() == mean.numel(),
            "head_norm_fwd: out/mean/rstd do not fit qkv ", qkv.shape.str());
  const bool ln = p.kind == HeadNormKind::LayerNorm;
  const float* px = host_f32(qkv, "head_norm qkv");
  float* po = host_f32(out, "head_norm out");
  float* pm = host_f32(mean, "head_norm mean");
  float* pr = host_f32(rstd, "head_norm rstd");
  const float* w[2] = {host_f32(p.q_w, "q_norm weight"), host_f32(p.k_w, "k_norm weight")};
  const float* b[2] = {ln ? host_f32(p.q_b, "q_norm bias") : nullptr,
                       ln ? host_f32(p.k_b, "k_norm bias") : nullptr};
#pragma omp parallel for schedule(static) if (g.rows * row_len > 16384)
  for (std::int64_t row = 0; row < g.rows; ++row) {
    const float* xr = px + row * row_len;
    float* yr = po + row * row_len;
    for (int part = 0; part < 2; ++part)
      for (std::int64_t h = 0; h < g.heads; ++h) {
        const std::int64_t o = (part * g.heads + h) * e;
        double s = 0;
        if (ln)
          for (std::int64_t i = 0; i < e; ++i) s += xr[o + i];
        const float mu = static_cast<float>(s / static_cast<double>(e));
        double v = 0;
        for (std::int64_t i = 0; i < e; ++i) {
          const double c = static_cast<double>(xr[o + i]) - mu;
          v += c * c;
        }
        const float r = math::norm_rstd(v / static_cast<double>(e), p.eps);
        const std::int64_t stat = row * 2 * g.heads + part * g.heads + h;
        pm[stat] = mu;
        pr[stat] = r;
        for (std::int64_t i = 0; i < e; ++i)
          yr[o + i] = (xr[o + i] - mu) * r * w[part][i] + (b[part] ? b[part][i] : 0.f);
      }
    if (yr != xr)
      for (std::int64_t i = 2 * g.heads * e; i < row_len; ++i) yr[i] = xr[i];
  }
}

void CpuBackend::head_norm_bwd(const Tensor& dout, const Tensor& qkv, const Tensor& mean,
                               const Tensor& rstd, int heads, const HeadNorm& p,
                               const HeadNormGrads& gr, const Tensor& dqkv) {
  const QkvGeom g = qkv_geom(qkv, heads, "head_norm_bwd");
  const std::int64_t e = g.e, row_len = 3 * g.heads * e;
  DIT_CHECK(dout.numel() == qkv.numel() && dqkv.numel() == qkv.numel() &&
                mean.numel() == g.rows * 2 * g.heads && rstd.numel() == mean.numel(),
            "head_norm_bwd: dout/dqkv/mean/rstd do not fit qkv ", qkv.shape.str());
  const bool ln = p.kind == HeadNormKind::LayerNorm;
  const float* pdy = host_f32(dout, "head_norm dout");
  const float* px = host_f32(qkv, "head_norm qkv");
  const float* pm = host_f32(mean, "head_norm mean");
  const float* pr = host_f32(rstd, "head_norm rstd");
  float* pdx = host_f32(dqkv, "head_norm dqkv");
  const float* w[2] = {host_f32(p.q_w, "q_norm weight"), host_f32(p.k_w, "k_norm weight")};
  float* dw[2] = {host_f32(gr.q_w, "q_norm weight grad"), host_f32(gr.k_w, "k_norm weight grad")};
  float* db[2] = {ln ? host_f32(gr.q_b, "q_norm bias grad") : nullptr,
                  ln ? host_f32(gr.k_b, "k_norm bias grad") : nullptr};
  std::vector<double> sw(2 * e, 0.0), sb(2 * e, 0.0);  // weight and bias grads, summed in order
  for (std::int64_t row = 0; row < g.rows; ++row) {
    const float* xr = px + row * row_len;
    const float* dyr = pdy + row * row_len;
    float* dxr = pdx + row * row_len;
    for (int part = 0; part < 2; ++part)
      for (std::int64_t h = 0; h < g.heads; ++h) {
        const std::int64_t o = (part * g.heads + h) * e;
        const std::int64_t stat = row * 2 * g.heads + part * g.heads + h;
        const float mu = pm[stat], r = pr[stat];
        double sg = 0, sgx = 0;
        for (std::int64_t i = 0; i < e; ++i) {
          const float xh = (xr[o + i] - mu) * r, gi = dyr[o + i] * w[part][i];
          sg += gi;
          sgx += static_cast<double>(gi) * xh;
          sw[part * e + i] += static_cast<double>(dyr[o + i]) * xh;
          sb[part * e + i] += dyr[o + i];
        }
        const float mg = static_cast<float>(sg / static_cast<double>(e));
        const float mgx = static_cast<float>(sgx / static_cast<double>(e));
        for (std::int64_t i = 0; i < e; ++i)
          dxr[o + i] = math::norm_dx(dyr[o + i] * w[part][i], (xr[o + i] - mu) * r, r, mg, mgx, ln);
      }
    if (dxr != dyr)
      for (std::int64_t i = 2 * g.heads * e; i < row_len; ++i) dxr[i] = dyr[i];
  }
  for (int part = 0; part < 2; ++part)
    for (std::int64_t i = 0; i < e; ++i) {
      dw[part][i] += static_cast<float>(sw[part * e + i]);
      if (db[part]) db[part][i] += static_cast<float>(sb[part * e + i]);
    }
}

namespace {
// Rotates q and k of every token by +angle (sign 1) or -angle (sign -1); copies v.
void rope_apply(const Tensor& in, int heads, int grid, const Tensor& out, float sign,
                const char* what) {
  const QkvGeom g = qkv_geom(in, heads, what);
  const std::int64_t t = in.dim(1), e = g.e, row_len = 3 * g.heads * e;
  DIT_CHECK(out.numel() == in.numel(), what, ": out ", out.shape.str(), " does not fit ",
            in.shape.str());
  DIT_CHECK(grid > 0 && t == static_cast<std::int64_t>(grid) * grid && e % 4 == 0, what, ": ", t,
            " tokens are not a ", grid, " x ", grid, " grid, or head dim ", e,
            " is not a multiple of 4");
  const float* px = host_f32(in, what);
  float* py = host_f32(out, what);
  const int half = static_cast<int>(e / 2);
  std::vector<float> cs(static_cast<std::size_t>(t * half)), sn(cs.size());
  for (std::int64_t tok = 0; tok < t; ++tok)
    for (int q = 0; q < half; ++q) {
      const float a = math::rope_angle(static_cast<int>(tok), q, grid, static_cast<int>(e));
      cs[tok * half + q] = std::cos(a);
      sn[tok * half + q] = sign * std::sin(a);
    }
#pragma omp parallel for schedule(static) if (g.rows * row_len > 16384)
  for (std::int64_t row = 0; row < g.rows; ++row) {
    const std::int64_t tok = row % t;
    const float* xr = px + row * row_len;
    float* yr = py + row * row_len;
    for (std::int64_t h = 0; h < 2 * g.heads; ++h)
      for (int q = 0; q < half; ++q) {
        const std::int64_t i = h * e + 2 * q;
        float y0, y1;
        math::rope_rotate(xr[i], xr[i + 1], cs[tok * half + q], sn[tok * half + q], y0, y1);
        yr[i] = y0;
        yr[i + 1] = y1;
      }
    if (yr != xr)
      for (std::int64_t i = 2 * g.heads * e; i < row_len; ++i) yr[i] = xr[i];
  }
}
}  // namespace

void CpuBackend::rope_fwd(const Tensor& qkv, int heads, int grid, const Tensor& out) {
  rope_apply(qkv, heads, grid, out, 1.f, "rope_fwd");
}

void CpuBackend::rope_bwd(const Tensor& dout, int heads, int grid, const Tensor& dqkv) {
  rope_apply(dout, heads, grid, dqkv, -1.f, "rope_bwd");
}

}  // namespace dit
