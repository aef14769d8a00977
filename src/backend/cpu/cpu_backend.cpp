// CPU backend: memory, elementwise and normalization primitives, embeddings, optimizer steps.
// GEMMs live in gemm.cpp and the fused attention in attention.cpp.
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/host_views.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>

#include <sys/mman.h>

namespace dit {

namespace {

void same_numel(const Tensor& a, const Tensor& b, const char* what) {
  DIT_CHECK(a.numel() == b.numel(), what, ": sizes differ, ", a.shape.str(), " vs ", b.shape.str());
}

using cpu::chunk_row;
using cpu::host_f32;
using cpu::token_geom;
using cpu::TokenGeom;

}  // namespace

void* CpuBackend::allocate(std::size_t bytes) {
  // Buffers of a page or more start on a page, so the pages release_pages hands back are the
  // buffer's own from its first byte (the page count the ZeRO accounting keeps is the system's).
  const std::size_t align = bytes >= page_bytes() ? page_bytes() : 256;
  void* p = std::aligned_alloc(align, (bytes + align - 1) / align * align);
  if (!p) throw Error("CPU backend: out of memory allocating " + std::to_string(bytes) + " bytes");
  blocks_[reinterpret_cast<std::uintptr_t>(p)] = bytes;
  return p;
}
void CpuBackend::deallocate(void* p) {
  blocks_.erase(reinterpret_cast<std::uintptr_t>(p));
  std::free(p);
}

bool CpuBackend::release_pages(void* p, std::size_t bytes) {
  const std::size_t page = page_bytes();
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  const std::uintptr_t first = (a + page - 1) / page * page, end = (a + bytes) / page * page;
  if (end > first) DIT_CHECK(madvise(reinterpret_cast<void*>(first), end - first, MADV_DONTNEED) == 0,
                             "CPU backend: madvise(MADV_DONTNEED) of ", end - first, " bytes failed");
  return true;
}

bool CpuBackend::owns(const void* p) const {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  auto it = blocks_.upper_bound(a);
  if (it == blocks_.begin()) return false;
  --it;
  return a < it->first + it->second;
}

void CpuBackend::copy(const Tensor& dst, const Tensor& src) {
  same_numel(dst, src, "copy");
  if (dst.numel() > 0 && owns(src.data) && !owns(dst.data)) count_sync();  // a download
  DIT_CHECK(dst.device == Device::Host && src.device == Device::Host,
            "copy: the CPU backend moves host memory only");
  const std::int64_t n = dst.numel();
  if (dst.dtype == src.dtype) {
    std::memmove(dst.data, src.data, dst.bytes());
  } else {
    DIT_CHECK(dst.dtype != DType::I32 && src.dtype != DType::I32, "copy: no conversion from ",
              dtype_name(src.dtype), " to ", dtype_name(dst.dtype));
#pragma omp parallel for schedule(static) if (n > 65536)
    for (std::int64_t i = 0; i < n; ++i)
      store_from_f32(dst.data, dst.dtype, i, load_as_f32(src.data, src.dtype, i));
  }
}

void CpuBackend::fill(const Tensor& t, float value) {
  float* p = host_f32(t, "fill");
  const std::int64_t n = t.numel();
#pragma omp parallel for schedule(static) if (n > 65536)
  for (std::int64_t i = 0; i < n; ++i) p[i] = value;
}

void CpuBackend::add_rowwise(const Tensor& y, const Tensor& v) {
  float* py = host_f32(y, "add_rowwise y");
  const float* pv = host_f32(v, "add_rowwise v");
  const std::int64_t l = v.numel();
  DIT_CHECK(l > 0 && y.numel() % l == 0, "add_rowwise: ", v.shape.str(), " does not tile ",
            y.shape.str());
  const std::int64_t rows = y.numel() / l;
#pragma omp parallel for schedule(static) if (rows * l > 65536)
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t i = 0; i < l; ++i) py[r * l + i] += pv[i];
}

void CpuBackend::sum_rows(const Tensor& x, const Tensor& out, Accumulate acc) {
  const float* px = host_f32(x, "sum_rows x");
  float* po = host_f32(out, "sum_rows out");
  const std::int64_t l = out.numel();
  DIT_CHECK(l > 0 && x.numel() % l == 0, "sum_rows: ", out.shape.str(), " does not tile ",
            x.shape.str());
  const std::int64_t rows = x.numel() / l;
  // Each column's sum runs down the rows in order (the same bits as one running sum per column),
  // a block of columns at a time so the rows are read along memory.
  constexpr std::int64_t kCols = 256;
  const std::int64_t blocks = (l + kCols - 1) / kCols;
#pragma omp parallel for schedule(static) if (rows * l > 65536 && blocks > 1)
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::int64_t i0 = b * kCols, w = std::min(kCols, l - i0);
    double s[kCols] = {};
    for (std::int64_t r = 0; r < rows; ++r) {
      const float* __restrict row = px + r * l + i0;
#pragma omp simd
      for (std::int64_t i = 0; i < w; ++i) s[i] += row[i];
    }
    for (std::int64_t i = 0; i < w; ++i)
      po[i0 + i] = static_cast<float>(acc == Accumulate::Add ? po[i0 + i] + s[i] : s[i]);
  }
}

void CpuBackend::transpose_01(const Tensor& src, const Tensor& dst) {
  DIT_CHECK(src.shape.rank == 3 && dst.shape.rank == 3 && src.dim(0) == dst.dim(1) &&
                src.dim(1) == dst.dim(0) && src.dim(2) == dst.dim(2),
            "transpose_01: ", src.shape.str(), " -> ", dst.shape.str());
  const float* ps = host_f32(src, "transpose_01 src");
  float* pd = host_f32(dst, "transpose_01 dst");
  const std::int64_t a = src.dim(0), b = src.dim(1), c = src.dim(2);
  for (std::int64_t i = 0; i < a; ++i)
    for (std::int64_t j = 0; j < b; ++j)
      std::memcpy(pd + (j * a + i) * c, ps + (i * b + j) * c, c * sizeof(float));
}

void CpuBackend::axpy(float alpha, const Tensor& x, const Tensor& y) {
  same_numel(x, y, "axpy");
  const float* px = host_f32(x, "axpy x");
  float* py = host_f32(y, "axpy y");
  const std::int64_t n = x.numel();
#pragma omp parallel for schedule(static) if (n > 65536)
  for (std::int64_t i = 0; i < n; ++i) py[i] += alpha * px[i];
}

void CpuBackend::scale(const Tensor& x, float alpha) {
  float* p = host_f32(x, "scale");
  const std::int64_t n = x.numel();
#pragma omp parallel for schedule(static) if (n > 65536)
  for (std::int64_t i = 0; i < n; ++i) p[i] *= alpha;
}

double CpuBackend::sum_squares(const Tensor& x) {
  count_sync();  // a result on the host
  const float* p = host_f32(x, "sum_squares");
  const std::int64_t n = x.numel();
  double s = 0;
#pragma omp parallel for schedule(static) reduction(+ : s) if (n > 65536)
  for (std::int64_t i = 0; i < n; ++i) s += static_cast<double>(p[i]) * p[i];
  return s;
}

void CpuBackend::gelu_tanh_fwd(const Tensor& x, const Tensor& y) {
  same_numel(x, y, "gelu_tanh_fwd");
  const float* px = host_f32(x, "gelu x");
  float* py = host_f32(y, "gelu y");
  const std::int64_t n = x.numel();
#pragma omp parallel for simd schedule(static) if (n > 16384)
  for (std::int64_t i = 0; i < n; ++i) py[i] = math::GeluTanh::forward(px[i]);
}

void CpuBackend::gelu_tanh_bwd(const Tensor& x, const Tensor& dy, const Tensor& dx) {
  same_numel(x, dy, "gelu_tanh_bwd");
  same_numel(x, dx, "gelu_tanh_bwd");
  const float* px = host_f32(x, "gelu x");
  const float* pdy = host_f32(dy, "gelu dy");
  float* pdx = host_f32(dx, "gelu dx");
  const std::int64_t n = x.numel();
#pragma omp parallel for simd schedule(static) if (n > 16384)
  for (std::int64_t i = 0; i < n; ++i) pdx[i] = pdy[i] * math::GeluTanh::derivative(px[i]);
}

void CpuBackend::silu_fwd(const Tensor& x, const Tensor& y) {
  same_numel(x, y, "silu_fwd");
  const float* px = host_f32(x, "silu x");
  float* py = host_f32(y, "silu y");
  for (std::int64_t i = 0, n = x.numel(); i < n; ++i) py[i] = math::Silu::forward(px[i]);
}

void CpuBackend::relu_fwd(const Tensor& x, const Tensor& y) {
  same_numel(x, y, "relu_fwd");
  const float* px = host_f32(x, "relu x");
  float* py = host_f32(y, "relu y");
  const std::int64_t n = x.numel();
#pragma omp parallel for schedule(static) if (n > 65536)
  for (std::int64_t i = 0; i < n; ++i) py[i] = math::Relu::forward(px[i]);
}

void CpuBackend::silu_bwd(const Tensor& x, const Tensor& dy, const Tensor& dx, Accumulate acc) {
  same_numel(x, dy, "silu_bwd");
  same_numel(x, dx, "silu_bwd");
  const float* px = host_f32(x, "silu x");
  const float* pdy = host_f32(dy, "silu dy");
  float* pdx = host_f32(dx, "silu dx");
  for (std::int64_t i = 0, n = x.numel(); i < n; ++i) {
    float g = pdy[i] * math::Silu::derivative(px[i]);
    pdx[i] = acc == Accumulate::Add ? pdx[i] + g : g;
  }
}

void CpuBackend::ln_modulate_fwd(const Tensor& x, const ModChunk& shift, const ModChunk& scale,
                                 float eps, const Tensor& y, const Tensor& mean,
                                 const Tensor& rstd) {
  const TokenGeom g = token_geom(x, shift, "ln_modulate_fwd");
  token_geom(x, scale, "ln_modulate_fwd");
  same_numel(x, y, "ln_modulate_fwd y");
  DIT_CHECK(mean.numel() == g.n * g.t && rstd.numel() == g.n * g.t,
            "ln_modulate_fwd: mean/rstd need N*T = ", g.n * g.t, " elements");
  const float* px = host_f32(x, "ln x");
  float* py = host_f32(y, "ln y");
  float* pm = host_f32(mean, "ln mean");
  float* pr = host_f32(rstd, "ln rstd");
#pragma omp parallel for schedule(static)
  for (std::int64_t row = 0; row < g.n * g.t; ++row) {
    const std::int64_t n = row / g.t;
    const float* xr = px + row * g.d;
    double s = 0;
    for (std::int64_t i = 0; i < g.d; ++i) s += xr[i];
    const double mu = s / g.d;
    double v = 0;
    for (std::int64_t i = 0; i < g.d; ++i) v += (xr[i] - mu) * (xr[i] - mu);
    const float r = static_cast<float>(1.0 / std::sqrt(v / g.d + eps));
    const float m = static_cast<float>(mu);
    const float* sh = chunk_row(shift, n, g.d);
    const float* sc = chunk_row(scale, n, g.d);
    float* yr = py + row * g.d;
    for (std::int64_t i = 0; i < g.d; ++i) yr[i] = math::modulate((xr[i] - m) * r, sh[i], sc[i]);
    pm[row] = m;
    pr[row] = r;
  }
}

void CpuBackend::ln_modulate_bwd(const Tensor& dy, const Tensor& x, const Tensor& mean,
                                 const Tensor& rstd, const ModChunk& scale, const Tensor& dx,
                                 Accumulate acc, const ModChunk& dshift, const ModChunk& dscale) {
  const TokenGeom g = token_geom(x, scale, "ln_modulate_bwd");
  token_geom(x, dshift, "ln_modulate_bwd");
  token_geom(x, dscale, "ln_modulate_bwd");
  same_numel(x, dy, "ln_modulate_bwd dy");
  same_numel(x, dx, "ln_modulate_bwd dx");
  const float* pdy = host_f32(dy, "ln dy");
  const float* px = host_f32(x, "ln x");
  const float* pm = host_f32(mean, "ln mean");
  const float* pr = host_f32(rstd, "ln rstd");
  float* pdx = host_f32(dx, "ln dx");
#pragma omp parallel for schedule(static)
  for (std::int64_t n = 0; n < g.n; ++n) {
    const float* sc = chunk_row(scale, n, g.d);
    float* dsh = chunk_row(dshift, n, g.d);
    float* dsc = chunk_row(dscale, n, g.d);
    for (std::int64_t i = 0; i < g.d; ++i) dsh[i] = dsc[i] = 0.f;
    for (std::int64_t t = 0; t < g.t; ++t) {
      const std::int64_t row = n * g.t + t;
      const float* xr = px + row * g.d;
      const float* dyr = pdy + row * g.d;
      float* dxr = pdx + row * g.d;
      const float m = pm[row], r = pr[row];
      // xn = (x - m) r;  g = dy (1 + scale);  dx = r (g - mean(g) - xn mean(g xn))
      double sg = 0, sgx = 0;
      for (std::int64_t i = 0; i < g.d; ++i) {
        const float xn = (xr[i] - m) * r;
        const float gi = dyr[i] * (1.f + sc[i]);
        sg += gi;
        sgx += gi * xn;
        dsh[i] += dyr[i];
        dsc[i] += dyr[i] * xn;
      }
      const float mg = static_cast<float>(sg / g.d), mgx = static_cast<float>(sgx / g.d);
      for (std::int64_t i = 0; i < g.d; ++i) {
        const float xn = (xr[i] - m) * r;
        const float v = r * (dyr[i] * (1.f + sc[i]) - mg - xn * mgx);
        dxr[i] = acc == Accumulate::Add ? dxr[i] + v : v;
      }
    }
  }
}

void CpuBackend::gate_residual_fwd(const Tensor& x, const Tensor& h, const ModChunk& gate) {
  const TokenGeom g = token_geom(x, gate, "gate_residual_fwd");
  same_numel(x, h, "gate_residual_fwd");
  float* px = host_f32(x, "gate x");
  const float* ph = host_f32(h, "gate h");
#pragma omp parallel for schedule(static)
  for (std::int64_t row = 0; row < g.n * g.t; ++row) {
    const float* gt = chunk_row(gate, row / g.t, g.d);
    for (std::int64_t i = 0; i < g.d; ++i) px[row * g.d + i] += gt[i] * ph[row * g.d + i];
  }
}

void CpuBackend::gate_residual_bwd(const Tensor& dx, const Tensor& h, const ModChunk& gate,
                                   const Tensor& dh, const ModChunk& dgate) {
  const TokenGeom g = token_geom(dx, gate, "gate_residual_bwd");
  token_geom(dx, dgate, "gate_residual_bwd");
  same_numel(dx, h, "gate_residual_bwd h");
  same_numel(dx, dh, "gate_residual_bwd dh");
  const float* pdx = host_f32(dx, "gate dx");
  const float* ph = host_f32(h, "gate h");
  float* pdh = host_f32(dh, "gate dh");
#pragma omp parallel for schedule(static)
  for (std::int64_t n = 0; n < g.n; ++n) {
    const float* gt = chunk_row(gate, n, g.d);
    float* dg = chunk_row(dgate, n, g.d);
    for (std::int64_t i = 0; i < g.d; ++i) dg[i] = 0.f;
    for (std::int64_t t = 0; t < g.t; ++t) {
      const std::int64_t o = (n * g.t + t) * g.d;
      for (std::int64_t i = 0; i < g.d; ++i) {
        pdh[o + i] = gt[i] * pdx[o + i];
        dg[i] += pdx[o + i] * ph[o + i];
      }
    }
  }
}

void CpuBackend::embedding_fwd(const Tensor& table, const Tensor& ids, const Tensor& out) {
  DIT_CHECK(ids.dtype == DType::I32 && table.shape.rank == 2 && out.shape.rank == 2 &&
                out.dim(0) == ids.numel() && out.dim(1) == table.dim(1),
            "embedding_fwd: table ", table.shape.str(), " ids ", ids.shape.str(), " out ",
            out.shape.str());
  const float* pt = host_f32(table, "embedding table");
  float* po = host_f32(out, "embedding out");
  const std::int64_t d = table.dim(1);
  for (std::int64_t n = 0; n < ids.numel(); ++n) {
    const std::int32_t id = ids.as<std::int32_t>()[n];
    DIT_CHECK(id >= 0 && id < table.dim(0), "embedding: id ", id, " outside [0, ", table.dim(0), ")");
    std::memcpy(po + n * d, pt + id * d, d * sizeof(float));
  }
}

void CpuBackend::embedding_bwd(const Tensor& dout, const Tensor& ids, const Tensor& dtable) {
  DIT_CHECK(ids.dtype == DType::I32 && dtable.shape.rank == 2 && dout.dim(0) == ids.numel() &&
                dout.dim(1) == dtable.dim(1),
            "embedding_bwd: dtable ", dtable.shape.str(), " ids ", ids.shape.str(), " dout ",
            dout.shape.str());
  const float* pd = host_f32(dout, "embedding dout");
  float* pt = host_f32(dtable, "embedding dtable");
  const std::int64_t d = dtable.dim(1);
  for (std::int64_t n = 0; n < ids.numel(); ++n) {
    const std::int32_t id = ids.as<std::int32_t>()[n];
    DIT_CHECK(id >= 0 && id < dtable.dim(0), "embedding: id ", id, " outside [0, ", dtable.dim(0), ")");
    for (std::int64_t i = 0; i < d; ++i) pt[id * d + i] += pd[n * d + i];
  }
}

void CpuBackend::timestep_embedding(const Tensor& t, float max_period, const Tensor& out) {
  DIT_CHECK(out.shape.rank == 2 && out.dim(0) == t.numel(), "timestep_embedding: t ",
            t.shape.str(), " out ", out.shape.str());
  const float* pt = host_f32(t, "timesteps");
  float* po = host_f32(out, "timestep features");
  const std::int64_t f = out.dim(1), half = f / 2;
  for (std::int64_t n = 0; n < t.numel(); ++n) {
    for (std::int64_t i = 0; i < half; ++i) {
      const double freq = std::exp(-std::log(static_cast<double>(max_period)) * i / half);
      const double arg = static_cast<double>(pt[n]) * freq;
      po[n * f + i] = static_cast<float>(std::cos(arg));
      po[n * f + half + i] = static_cast<float>(std::sin(arg));
    }
    if (f % 2) po[n * f + f - 1] = 0.f;
  }
}

namespace {
// Visits every (image element, patch element) pair of a patchify; fn(img_index, patch_index).
template <typename Fn>
void for_each_patch_element(const Tensor& img, const Tensor& patches, int p, PatchOrder order,
                            Fn fn) {
  DIT_CHECK(img.shape.rank == 4 && p > 0 && img.dim(2) % p == 0 && img.dim(3) % p == 0,
            "patchify: image ", img.shape.str(), " is not divisible into ", p, "x", p, " patches");
  const std::int64_t n = img.dim(0), c = img.dim(1), h = img.dim(2), w = img.dim(3);
  const std::int64_t gh = h / p, gw = w / p, feat = c * p * p;
  DIT_CHECK(patches.shape.rank == 3 && patches.dim(0) == n && patches.dim(1) == gh * gw &&
                patches.dim(2) == feat,
            "patchify: patches ", patches.shape.str(), " do not match image ", img.shape.str(),
            " with p = ", p);
#pragma omp parallel for collapse(2) schedule(static) if (n * c * h * w > 65536)
  for (std::int64_t b = 0; b < n; ++b)
    for (std::int64_t ch = 0; ch < c; ++ch)
      for (std::int64_t y = 0; y < h; ++y)
        for (std::int64_t x = 0; x < w; ++x) {
          const std::int64_t tok = (y / p) * gw + x / p, i = y % p, j = x % p;
          const std::int64_t f = order == PatchOrder::ChannelMajor ? (ch * p + i) * p + j
                                                                   : (i * p + j) * c + ch;
          fn(((b * c + ch) * h + y) * w + x, (b * gh * gw + tok) * feat + f);
        }
}
}  // namespace

void CpuBackend::patchify(const Tensor& img, int p, PatchOrder order, const Tensor& patches) {
  const float* pi = host_f32(img, "patchify image");
  float* pp = host_f32(patches, "patchify patches");
  for_each_patch_element(img, patches, p, order,
                         [&](std::int64_t a, std::int64_t b) { pp[b] = pi[a]; });
}

void CpuBackend::unpatchify(const Tensor& patches, int p, PatchOrder order, const Tensor& img) {
  const float* pp = host_f32(patches, "unpatchify patches");
  float* pi = host_f32(img, "unpatchify image");
  for_each_patch_element(img, patches, p, order,
                         [&](std::int64_t a, std::int64_t b) { pi[a] = pp[b]; });
}

void CpuBackend::adamw_step(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                            const Tensor& exp_avg_sq, const math::AdamWParams& h) {
  same_numel(param, grad, "adamw_step grad");
  same_numel(param, exp_avg, "adamw_step exp_avg");
  same_numel(param, exp_avg_sq, "adamw_step exp_avg_sq");
  float* p = host_f32(param, "adamw param");
  const float* g = host_f32(grad, "adamw grad");
  float* m = host_f32(exp_avg, "adamw exp_avg");
  float* v = host_f32(exp_avg_sq, "adamw exp_avg_sq");
  const std::int64_t n = param.numel();
#pragma omp parallel for schedule(static) if (n > 65536)
  for (std::int64_t i = 0; i < n; ++i) math::adamw_update(p[i], g[i], m[i], v[i], h);
}

void CpuBackend::ema_step(const Tensor& ema, const Tensor& param, float decay) {
  same_numel(ema, param, "ema_step");
  float* e = host_f32(ema, "ema");
  const float* p = host_f32(param, "ema param");
  const std::int64_t n = ema.numel();
#pragma omp parallel for schedule(static) if (n > 65536)
  for (std::int64_t i = 0; i < n; ++i) e[i] = math::ema_update(e[i], p[i], decay);
}

}  // namespace dit
