// CPU backend: the image primitives of the FID Inception-V3 beside the VAE's (image_ops.cpp):
// pooling over windows, the bilinear resize of its input, and the channel copies that concatenate
// its branches. Loops run in parallel over (image, channel) planes, which no two iterations share;
// window sums are taken in double.
#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/host_views.h"

namespace dit {

namespace {

using cpu::host_f32;

// One output plane of pool2d_fwd: in (H, W) -> out (Ho, Wo).
void pool_plane(const Pool2dShape& s, const PoolGeometry& g, PoolKind kind, const float* in, float* out) {
  const double full = static_cast<double>(g.kh) * g.kw;
  for (std::int64_t oy = 0; oy < s.oh; ++oy) {
    const std::int64_t top = oy * g.stride_h - g.pad_top;
    const std::int64_t y0 = std::max<std::int64_t>(top, 0), y1 = std::min<std::int64_t>(top + g.kh, s.h);
    for (std::int64_t ox = 0; ox < s.ow; ++ox) {
      const std::int64_t left = ox * g.stride_w - g.pad_left;
      const std::int64_t x0 = std::max<std::int64_t>(left, 0), x1 = std::min<std::int64_t>(left + g.kw, s.w);
      double sum = 0.0;
      float best = -std::numeric_limits<float>::infinity();
      for (std::int64_t a = y0; a < y1; ++a)
        for (std::int64_t b = x0; b < x1; ++b) {
          const float v = in[a * s.w + b];
          sum += v;
          best = std::max(best, v);
        }
      const double inside = static_cast<double>((y1 - y0) * (x1 - x0));
      float& o = out[oy * s.ow + ox];
      if (kind == PoolKind::Max)
        o = best;
      else
        o = static_cast<float>(sum / (kind == PoolKind::AverageExcludingPadding ? inside : full));
    }
  }
}

}  // namespace

void CpuBackend::pool2d_fwd(const Tensor& x, const PoolGeometry& g, PoolKind kind, const Tensor& y) {
  const Pool2dShape s = pool2d_shape(x, g, y);
  const float* px = host_f32(x, "pool2d x");
  float* py = host_f32(y, "pool2d y");
  const std::int64_t planes = s.n * s.c, in_plane = s.h * s.w, out_plane = s.oh * s.ow;
#pragma omp parallel for schedule(static) if (planes * out_plane * g.kh * g.kw > 65536)
  for (std::int64_t p = 0; p < planes; ++p) pool_plane(s, g, kind, px + p * in_plane, py + p * out_plane);
}

void CpuBackend::resize_bilinear(const Tensor& x, const Tensor& y) {
  check_resize(x, y);
  const float* px = host_f32(x, "resize x");
  float* py = host_f32(y, "resize y");
  const std::int64_t planes = x.dim(0) * x.dim(1);
  const int h = static_cast<int>(x.dim(2)), w = static_cast<int>(x.dim(3));
  const int oh = static_cast<int>(y.dim(2)), ow = static_cast<int>(y.dim(3));
  std::vector<math::BilinearTap> ty(static_cast<std::size_t>(oh)), tx(static_cast<std::size_t>(ow));
  for (int o = 0; o < oh; ++o) ty[static_cast<std::size_t>(o)] = math::bilinear_tap(o, h, oh);
  for (int o = 0; o < ow; ++o) tx[static_cast<std::size_t>(o)] = math::bilinear_tap(o, w, ow);
#pragma omp parallel for schedule(static) if (planes * oh * ow > 65536)
  for (std::int64_t p = 0; p < planes; ++p) {
    const float* in = px + p * h * w;
    float* out = py + p * oh * ow;
    for (int oy = 0; oy < oh; ++oy) {
      const math::BilinearTap& v = ty[static_cast<std::size_t>(oy)];
      const float* r0 = in + static_cast<std::int64_t>(v.i0) * w;
      const float* r1 = in + static_cast<std::int64_t>(v.i1) * w;
      for (int ox = 0; ox < ow; ++ox) {
        const math::BilinearTap& u = tx[static_cast<std::size_t>(ox)];
        out[static_cast<std::int64_t>(oy) * ow + ox] =
            v.w0 * (u.w0 * r0[u.i0] + u.w1 * r0[u.i1]) + v.w1 * (u.w0 * r1[u.i0] + u.w1 * r1[u.i1]);
      }
    }
  }
}

void CpuBackend::copy_channels(const Tensor& src, const Tensor& dst, std::int64_t channel_offset) {
  check_copy_channels(src, dst, channel_offset);
  const float* ps = host_f32(src, "copy_channels src");
  float* pd = host_f32(dst, "copy_channels dst");
  const std::int64_t plane = src.dim(2) * src.dim(3), block = src.dim(1) * plane, stride = dst.dim(1) * plane;
  for (std::int64_t i = 0; i < src.dim(0); ++i)
    std::memcpy(pd + i * stride + channel_offset * plane, ps + i * block,
                static_cast<std::size_t>(block) * sizeof(float));
}

}  // namespace dit
