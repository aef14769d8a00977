// CPU backend: the image-network primitives (backend.h "image networks"). Convolution is im2col
// over a band of output rows and one GEMM per band: the band's patches form a (C kh kw, rows Wo)
// matrix that the weight (K, C kh kw) multiplies straight into y's rows, so the patch matrix stays
// near 32 MB whatever the image (a 3x3 convolution of 128 channels at 256 x 256 would need 300 MB
// for the whole image). A 1x1 stride-1 convolution without padding reads x as it is.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/host_views.h"

namespace dit {

namespace {

using cpu::host_f32;

constexpr std::int64_t kMaxPatchFloats = std::int64_t(8) << 20;

// Rows [r0, r0 + rows) of image `x` (C, H, W) as patches: col (C kh kw, rows Wo).
void im2col_rows(const ConvShape& s, const ConvGeometry& g, const float* x, std::int64_t r0,
                 std::int64_t rows, float* col) {
  const std::int64_t cols = rows * s.ow;
#pragma omp parallel for schedule(static) if (s.c * s.kh * s.kw * cols > 65536)
  for (std::int64_t ci = 0; ci < s.c; ++ci) {
    const float* plane = x + ci * s.h * s.w;
    for (std::int64_t a = 0; a < s.kh; ++a)
      for (std::int64_t b = 0; b < s.kw; ++b) {
        float* dst = col + ((ci * s.kh + a) * s.kw + b) * cols;
        for (std::int64_t oy = r0; oy < r0 + rows; ++oy) {
          float* row = dst + (oy - r0) * s.ow;
          const std::int64_t iy = oy * g.stride_h - g.pad_top + a;
          if (iy < 0 || iy >= s.h) {
            std::fill(row, row + s.ow, 0.f);
            continue;
          }
          const float* src = plane + iy * s.w;
          for (std::int64_t ox = 0; ox < s.ow; ++ox) {
            const std::int64_t ix = ox * g.stride_w - g.pad_left + b;
            row[ox] = (ix >= 0 && ix < s.w) ? src[ix] : 0.f;
          }
        }
      }
  }
}

}  // namespace

void CpuBackend::conv2d_fwd(const Tensor& x, const Tensor& w, const Tensor& bias,
                            const ConvGeometry& g, const Tensor& y, Accumulate acc) {
  const ConvShape s = conv_shape(x, w, g, y);
  const float* px = host_f32(x, "conv2d x");
  const float* pw = host_f32(w, "conv2d w");
  float* py = host_f32(y, "conv2d y");
  const float* pb = nullptr;
  if (bias.data != nullptr) {
    DIT_CHECK(bias.numel() == s.k, "conv2d: a bias of ", bias.numel(), " values for ", s.k, " output channels");
    pb = host_f32(bias, "conv2d bias");
  }
  const std::int64_t patch = s.c * s.kh * s.kw, plane = s.oh * s.ow;
  const float beta = acc == Accumulate::Add ? 1.f : 0.f;
  const bool direct = s.kh == 1 && s.kw == 1 && g.stride_h == 1 && g.stride_w == 1 && g.pad_top == 0 &&
                      g.pad_bottom == 0 && g.pad_left == 0 && g.pad_right == 0;
  const std::int64_t band = std::clamp<std::int64_t>(kMaxPatchFloats / std::max<std::int64_t>(patch * s.ow, 1), 1, s.oh);
  std::vector<float> col(direct ? 0 : static_cast<std::size_t>(patch * band * s.ow));
  for (std::int64_t n = 0; n < s.n; ++n) {
    const float* xn = px + n * s.c * s.h * s.w;
    float* yn = py + n * s.k * plane;
    if (direct) {
      cpu_sgemm(Transpose::No, Transpose::No, s.k, plane, s.c, 1.f, pw, s.c, xn, plane, beta, yn, plane);
    } else {
      for (std::int64_t r0 = 0; r0 < s.oh; r0 += band) {
        const std::int64_t rows = std::min(band, s.oh - r0), cols = rows * s.ow;
        im2col_rows(s, g, xn, r0, rows, col.data());
        cpu_sgemm(Transpose::No, Transpose::No, s.k, cols, patch, 1.f, pw, patch, col.data(), cols, beta,
                  yn + r0 * s.ow, plane);
      }
    }
    if (pb != nullptr) {
#pragma omp parallel for schedule(static) if (s.k * plane > 65536)
      for (std::int64_t k = 0; k < s.k; ++k) {
        float* yk = yn + k * plane;
        for (std::int64_t i = 0; i < plane; ++i) yk[i] += pb[k];
      }
    }
  }
}

void CpuBackend::group_norm_fwd(const Tensor& x, int groups, const Tensor& gamma, const Tensor& beta,
                                float eps, bool silu, const Tensor& y) {
  const GroupNormShape s = group_norm_shape(x, groups, gamma, beta, y);
  const float* px = host_f32(x, "group_norm x");
  const float* pg = host_f32(gamma, "group_norm gamma");
  const float* pb = host_f32(beta, "group_norm beta");
  float* py = host_f32(y, "group_norm y");
  const std::int64_t per_group = s.c / groups, count = per_group * s.len, units = s.n * groups;
#pragma omp parallel for schedule(static) if (s.n * s.c * s.len > 65536)
  for (std::int64_t u = 0; u < units; ++u) {
    const std::int64_t c0 = (u % groups) * per_group;
    const float* xg = px + u * count;  // (n, group) is contiguous: channels c0.. of sample n
    double sum = 0.0;
    for (std::int64_t i = 0; i < count; ++i) sum += xg[i];
    const double mean = count > 0 ? sum / static_cast<double>(count) : 0.0;
    double sq = 0.0;
    for (std::int64_t i = 0; i < count; ++i) {
      const double d = xg[i] - mean;
      sq += d * d;
    }
    const float rstd = math::norm_rstd(count > 0 ? sq / static_cast<double>(count) : 0.0, eps);
    float* yg = py + u * count;
    for (std::int64_t c = 0; c < per_group; ++c)
      for (std::int64_t i = 0; i < s.len; ++i) {
        const std::int64_t j = c * s.len + i;
        yg[j] = math::group_norm_out(xg[j], static_cast<float>(mean), rstd, pg[c0 + c], pb[c0 + c], silu);
      }
  }
}

void CpuBackend::upsample_nearest2x(const Tensor& x, const Tensor& y) {
  check_upsample2x(x, y);
  const float* px = host_f32(x, "upsample x");
  float* py = host_f32(y, "upsample y");
  const std::int64_t planes = x.dim(0) * x.dim(1), h = x.dim(2), w = x.dim(3);
#pragma omp parallel for schedule(static) if (planes * h * w > 65536)
  for (std::int64_t p = 0; p < planes; ++p)
    for (std::int64_t i = 0; i < 2 * h; ++i) {
      const float* src = px + (p * h + i / 2) * w;
      float* dst = py + (p * 2 * h + i) * 2 * w;
      for (std::int64_t j = 0; j < 2 * w; ++j) dst[j] = src[j / 2];
    }
}

}  // namespace dit
