// CPU backend: the image-network primitives (backend.h "image networks"). Convolution is im2col
// over bands of output rows and one GEMM per band: a band's patches form a (C kh kw, rows Wo)
// matrix that the weight (K, C kh kw) multiplies into a (K, rows Wo) block of y. The bands are
// small (about a megabyte of patches or of output, at least 256 columns) and each OpenMP thread
// takes whole bands, with its own buffers: it gathers a band's patches, which are still in cache
// when its single-threaded GEMM reads them, and the GEMM writes a dense output block that is then
// added into y with the bias (store_band says why not into y directly). A single-threaded Eigen
// GEMM runs at 90-100 GFLOP/s on a core at these shapes but at 24-70 GFLOP/s once the patch matrix
// spans a whole 256 x 256 image (tens to hundreds of MB), and bands of one thread need no
// synchronisation with another's. A 1x1 stride-1 convolution without padding reads x as it is,
// in column blocks of the same size.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/host_views.h"

namespace dit {

namespace {

using cpu::host_f32;

// The floats a band's patches (or output block) aim at (1 MB), and the fewest columns a band has
// (narrower GEMMs lose speed; with 4608-row patches, C = 512 at 3x3, 256 columns are 4.7 MB).
constexpr std::int64_t kBandFloats = std::int64_t(1) << 18;
constexpr std::int64_t kMinBandCols = 256;

// A thread's buffers (0: patches, 1: a band's GEMM output), kept between calls (grown, never
// shrunk, never zeroed).
float* thread_scratch(int which, std::size_t floats) {
  thread_local std::unique_ptr<float[]> buf[2];
  thread_local std::size_t size[2] = {0, 0};
  if (size[which] < floats) {
    buf[which].reset(new float[floats]);
    size[which] = floats;
  }
  return buf[which].get();
}

// First index i >= 0 with i * s + off >= 0, and one past the last with i * s + off < lim (s > 0).
std::int64_t first_inside(std::int64_t off, std::int64_t s) { return off >= 0 ? 0 : (-off + s - 1) / s; }
std::int64_t end_inside(std::int64_t off, std::int64_t s, std::int64_t lim) {
  return lim - off <= 0 ? 0 : (lim - off - 1) / s + 1;
}

// Rows [r0, r0 + rows) of image `x` (C, H, W) as patches: col (C kh kw, rows Wo).
void im2col_rows(const ConvShape& s, const ConvGeometry& g, const float* x, std::int64_t r0,
                 std::int64_t rows, float* col) {
  const std::int64_t cols = rows * s.ow;
  for (std::int64_t ci = 0; ci < s.c; ++ci) {
    const float* plane = x + ci * s.h * s.w;
    for (std::int64_t a = 0; a < s.kh; ++a)
      for (std::int64_t b = 0; b < s.kw; ++b) {
        float* dst = col + ((ci * s.kh + a) * s.kw + b) * cols;
        // Output columns [lo, hi) read inside the row: ix = ox stride_w - pad_left + b.
        const std::int64_t off = b - g.pad_left;
        const std::int64_t lo = std::min(first_inside(off, g.stride_w), s.ow);
        const std::int64_t hi = std::max(lo, std::min(end_inside(off, g.stride_w, s.w), s.ow));
        for (std::int64_t oy = r0; oy < r0 + rows; ++oy) {
          float* row = dst + (oy - r0) * s.ow;
          const std::int64_t iy = oy * g.stride_h - g.pad_top + a;
          if (iy < 0 || iy >= s.h) {
            std::fill(row, row + s.ow, 0.f);
            continue;
          }
          const float* src = plane + iy * s.w;
          std::fill(row, row + lo, 0.f);
          if (g.stride_w == 1) {
            std::memcpy(row + lo, src + lo + off, static_cast<std::size_t>(hi - lo) * sizeof(float));
          } else {
            for (std::int64_t ox = lo; ox < hi; ++ox) row[ox] = src[ox * g.stride_w + off];
          }
          std::fill(row + hi, row + s.ow, 0.f);
        }
      }
  }
}

// A band's GEMM output out (k, len) into y's rows [j0, j0 + len) of one image (plane pixels a
// channel), plus the bias; added to what y holds with Accumulate::Add. The GEMM writes a dense
// buffer rather than y itself: y's rows lie a power of two apart (256 KB at 256 x 256), and
// Eigen's zeroing and updating of a tile strided so ran through L2 as through one set.
void store_band(const float* out, std::int64_t k, std::int64_t len, const float* bias, Accumulate acc,
                std::int64_t plane, std::int64_t j0, float* y) {
  for (std::int64_t i = 0; i < k; ++i) {
    const float* o = out + i * len;
    float* yk = y + i * plane + j0;
    const float b = bias != nullptr ? bias[i] : 0.f;
    if (acc == Accumulate::Add) {
      for (std::int64_t j = 0; j < len; ++j) yk[j] += o[j] + b;
    } else {
      for (std::int64_t j = 0; j < len; ++j) yk[j] = o[j] + b;
    }
  }
}

// The sum of x[i] - center (Squares: of (x[i] - center)^2) over n floats, in double: eight
// independent partial sums, so the loop vectorizes instead of waiting on one serial chain of adds.
template <bool Squares>
double sum_f64(const float* x, std::int64_t n, double center) {
  double part[8] = {};
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) {
      const double d = static_cast<double>(x[i + l]) - center;
      part[l] += Squares ? d * d : d;
    }
  double sum = 0.0;
  for (; i < n; ++i) {
    const double d = static_cast<double>(x[i]) - center;
    sum += Squares ? d * d : d;
  }
  for (int l = 0; l < 8; ++l) sum += part[l];
  return sum;
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
  if (s.n == 0 || s.k == 0 || plane == 0) return;
  const bool direct = s.kh == 1 && s.kw == 1 && g.stride_h == 1 && g.stride_w == 1 && g.pad_top == 0 &&
                      g.pad_bottom == 0 && g.pad_left == 0 && g.pad_right == 0;
  const std::int64_t want_cols = std::max(kMinBandCols, kBandFloats / std::max({patch, s.k, std::int64_t(1)}));
  // A band: `band` output rows (im2col) or `band` columns of the plane (direct).
  const std::int64_t band = direct ? std::min(want_cols, plane)
                                   : std::clamp<std::int64_t>((want_cols + s.ow - 1) / s.ow, 1, s.oh);
  const std::int64_t band_cols = direct ? band : band * s.ow;
  const std::int64_t per_image = direct ? (plane + band - 1) / band : (s.oh + band - 1) / band;
  const std::int64_t tiles = s.n * per_image;
  auto run = [&](std::int64_t t) {
    const std::int64_t n = t / per_image, b0 = (t % per_image) * band;
    const float* xn = px + n * s.c * s.h * s.w;
    float* out = thread_scratch(1, static_cast<std::size_t>(s.k * band_cols));
    if (direct) {
      const std::int64_t len = std::min(band, plane - b0);
      cpu_sgemm(Transpose::No, Transpose::No, s.k, len, s.c, 1.f, pw, s.c, xn + b0, plane, 0.f, out, len);
      store_band(out, s.k, len, pb, acc, plane, b0, py + n * s.k * plane);
    } else {
      const std::int64_t rows = std::min(band, s.oh - b0), cols = rows * s.ow;
      float* col = thread_scratch(0, static_cast<std::size_t>(patch * band_cols));
      im2col_rows(s, g, xn, b0, rows, col);
      cpu_sgemm(Transpose::No, Transpose::No, s.k, cols, patch, 1.f, pw, patch, col, cols, 0.f, out, cols);
      store_band(out, s.k, cols, pb, acc, plane, b0 * s.ow, py + n * s.k * plane);
    }
  };
  // Whole bands per thread; with fewer bands than threads, one band after the other, each GEMM
  // then using every thread.
  if (tiles >= omp_get_max_threads() && omp_get_max_threads() > 1 && !omp_in_parallel()) {
#pragma omp parallel for schedule(dynamic, 1)
    for (std::int64_t t = 0; t < tiles; ++t) run(t);
  } else {
    for (std::int64_t t = 0; t < tiles; ++t) run(t);
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
    const double mean = count > 0 ? sum_f64<false>(xg, count, 0.0) / static_cast<double>(count) : 0.0;
    const double var = count > 0 ? sum_f64<true>(xg, count, mean) / static_cast<double>(count) : 0.0;
    const float rstd = math::norm_rstd(var, eps), m = static_cast<float>(mean);
    float* yg = py + u * count;
    for (std::int64_t c = 0; c < per_group; ++c) {
      const float* xc = xg + c * s.len;
      float* yc = yg + c * s.len;
      const float gc = pg[c0 + c], bc = pb[c0 + c];
      // Each value in place of its own (y may be x): vector lanes never mix elements.
      if (silu) {
#pragma omp simd
        for (std::int64_t i = 0; i < s.len; ++i) yc[i] = math::group_norm_out(xc[i], m, rstd, gc, bc, true);
      } else {
#pragma omp simd
        for (std::int64_t i = 0; i < s.len; ++i) yc[i] = math::group_norm_out(xc[i], m, rstd, gc, bc, false);
      }
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
    for (std::int64_t i = 0; i < h; ++i) {
      const float* src = px + (p * h + i) * w;
      float* dst = py + (p * 2 * h + 2 * i) * 2 * w;  // output rows 2i and 2i + 1
      for (std::int64_t j = 0; j < w; ++j) dst[2 * j] = dst[2 * j + 1] = src[j];
      std::memcpy(dst + 2 * w, dst, static_cast<std::size_t>(2 * w) * sizeof(float));
    }
}

}  // namespace dit
