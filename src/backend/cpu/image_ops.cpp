// CPU backend: the image-network primitives (backend.h "image networks"). Convolution is im2col
// over bands of output rows and one GEMM per band: a band's patches form a (C kh kw, rows Wo)
// matrix that the weight (K, C kh kw) multiplies into a (K, rows Wo) block of y. The bands are
// small (about a megabyte of patches or of output, at least 256 columns) and each OpenMP thread
// takes whole bands, with its own buffers: it gathers a band's patches, which are still in cache
// when its single-threaded GEMM reads them, and the GEMM writes a dense output block that is then
// added into y with the bias (store_band says why not into y directly). With fewer bands than
// threads, the output channels of a band are split between threads. A 1x1 stride-1 convolution
// without padding reads x as it is, in column blocks of the same size.
// The GEMM: when the backend's GEMM kernel is avx512 (packed_gemm.h), that kernel's register tile
// (8 output channels x 32 columns) on this file's own packing (the weights packed once a call,
// the patches gathered straight into the tile's layout), about 1.6x Eigen's AVX2 GEMM here
// (150-175 against 90-100 GFLOP/s a core on these bands; Eigen falls to 24-70 on patch matrices
// of a whole 256 x 256 image); with another kernel (DIT_CPU_GEMM=avx2 or eigen, or a CPU without
// AVX-512F), im2col bands through cpu_sgemm. GroupNorm has an AVX-512 build of the same loops too.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string_view>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/host_views.h"
#include "backend/cpu/packed_gemm.h"

namespace dit {

namespace {

using cpu::host_f32;

// The floats a band's patches (or output block) aim at (1 MB), and the fewest columns a band has
// (narrower GEMMs lose speed; with 4608-row patches, C = 512 at 3x3, 256 columns are 4.7 MB).
constexpr std::int64_t kBandFloats = std::int64_t(1) << 18;
constexpr std::int64_t kMinBandCols = 256;

// A thread's buffers, by slot (0: patches, 1: a band's GEMM output, 2: packed weights, 3: one
// patch row), 64-byte aligned and kept between calls (grown, never shrunk, never zeroed).
// First index i >= 0 with i * s + off >= 0, and one past the last with i * s + off < lim (s > 0).
std::int64_t first_inside(std::int64_t off, std::int64_t s) { return off >= 0 ? 0 : (-off + s - 1) / s; }
std::int64_t end_inside(std::int64_t off, std::int64_t s, std::int64_t lim) {
  return lim - off <= 0 ? 0 : (lim - off - 1) / s + 1;
}

// Patch row p = (ci, a, b) of output rows [r0, r0 + rows) of image `x` (C, H, W): dst (rows Wo).
void im2col_row(const ConvShape& s, const ConvGeometry& g, const float* x, std::int64_t r0, std::int64_t rows,
                std::int64_t p, float* dst) {
  const std::int64_t b = p % s.kw, a = (p / s.kw) % s.kh, ci = p / (s.kw * s.kh);
  const float* plane = x + ci * s.h * s.w;
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

// Rows [r0, r0 + rows) as patches: col (C kh kw, rows Wo).
void im2col_rows(const ConvShape& s, const ConvGeometry& g, const float* x, std::int64_t r0, std::int64_t rows,
                 float* col) {
  const std::int64_t cols = rows * s.ow;
  for (std::int64_t p = 0; p < s.c * s.kh * s.kw; ++p) im2col_row(s, g, x, r0, rows, p, col + p * cols);
}

// ---- the avx512 tile's GEMM for a band (the avx512 GEMM kernel; the others use cpu_sgemm) -------
// out (K, cols) = W (K, P) col (P, cols) in micro-tiles of kMR output channels x kNR columns: W
// packed once a call into panels (P, kMR), a band's patches gathered into strips (P, kNR)
// straight from x, kKC patch rows per pass over a tile (a strip's kKC rows, 32 KB, stay in L1),
// the tile of packed_gemm.h (2 kMR accumulators of 16 floats, the weights broadcast). The tile
// alone runs at about 90% of the core's AVX-512 FMA peak.
constexpr int kMR = cpu::kTileMR, kNR = cpu::kTileNR;
constexpr std::int64_t kKC = 256;
constexpr std::int64_t kStreamBytes = std::int64_t(16) << 20;  // outputs this large: streaming stores

bool use_avx512() { return cpu::gemm_kernel() == cpu::GemmKernel::Avx512; }

// panels (ceil(K / kMR), P, kMR) of w (K, P); rows past K are zero.
void pack_weights(const float* w, std::int64_t k, std::int64_t patch, float* panels) {
  const std::int64_t np = (k + kMR - 1) / kMR;
#pragma omp parallel for schedule(static) if (k * patch > 65536 && !omp_in_parallel())
  for (std::int64_t i = 0; i < np; ++i) {
    float* dst = panels + i * patch * kMR;
    for (std::int64_t p = 0; p < patch; ++p)
      for (int r = 0; r < kMR; ++r) {
        const std::int64_t row = i * kMR + r;
        dst[p * kMR + r] = row < k ? w[row * patch + p] : 0.f;
      }
  }
}

// Band columns [j, j + n) of patch row p in strips (strips, P, kNR): column j + i gets src[i]
// for i in [lo, hi) and zero elsewhere (src is not read outside [lo, hi); it may be null when the
// range is empty). Aligned runs of 16 columns move as one masked vector.
__attribute__((target("avx512f"))) void put_row(float* strips, std::int64_t patch, std::int64_t p, std::int64_t j,
                                                const float* src, std::int64_t n, std::int64_t lo, std::int64_t hi) {
  std::int64_t i = 0;
  while (i < n) {
    const std::int64_t col = j + i, lane = col % kNR;
    float* dst = strips + ((col / kNR) * patch + p) * kNR + lane;
    if (lane % 16 == 0 && i + 16 <= n) {
      const std::int64_t a = std::clamp<std::int64_t>(lo - i, 0, 16), b = std::clamp<std::int64_t>(hi - i, 0, 16);
      const auto mask = static_cast<__mmask16>(a < b ? ((1u << b) - 1u) & ~((1u << a) - 1u) : 0u);
      _mm512_store_ps(dst, mask == 0xFFFF ? _mm512_loadu_ps(src + i)
                           : mask == 0    ? _mm512_setzero_ps()
                                          : _mm512_maskz_loadu_ps(mask, src + i));
      i += 16;
    } else {
      *dst = (i >= lo && i < hi) ? src[i] : 0.f;
      ++i;
    }
  }
}

// Patch row p of output rows [r0, r0 + rows) straight into strips (stride 1 across; other
// strides through `row`, a buffer of rows Wo), then zeros up to the last strip's end.
void im2col_strips(const ConvShape& s, const ConvGeometry& g, const float* x, std::int64_t r0, std::int64_t rows,
                   std::int64_t p, std::int64_t patch, float* row, float* strips) {
  const std::int64_t cols = rows * s.ow, padded = (cols + kNR - 1) / kNR * kNR;
  if (g.stride_w != 1) {
    im2col_row(s, g, x, r0, rows, p, row);
    put_row(strips, patch, p, 0, row, cols, 0, cols);
  } else {
    const std::int64_t b = p % s.kw, a = (p / s.kw) % s.kh, ci = p / (s.kw * s.kh);
    // Output column ox reads input column ox + off, inside the row for ox in [lo, hi).
    const std::int64_t off = b - g.pad_left;
    const std::int64_t lo = std::min(first_inside(off, 1), s.ow);
    const std::int64_t hi = std::max(lo, std::min(end_inside(off, 1, s.w), s.ow));
    for (std::int64_t oy = r0; oy < r0 + rows; ++oy) {
      const std::int64_t j = (oy - r0) * s.ow, iy = oy * g.stride_h - g.pad_top + a;
      if (iy < 0 || iy >= s.h)
        put_row(strips, patch, p, j, nullptr, s.ow, 0, 0);
      else
        put_row(strips, patch, p, j, x + (ci * s.h + iy) * s.w + off, s.ow, lo, hi);
    }
  }
  put_row(strips, patch, p, cols, nullptr, padded - cols, 0, 0);
}

// out rows [i0 kMR, i1 kMR) (row stride ldo = strips kNR) = panels [i0, i1) times the strips.
void band_gemm(const float* panels, std::int64_t i0, std::int64_t i1, const float* strips, std::int64_t nstrips,
               std::int64_t patch, float* out) {
  const std::int64_t ldo = nstrips * kNR;
  for (std::int64_t p0 = 0; p0 < patch; p0 += kKC) {
    const std::int64_t kc = std::min(kKC, patch - p0);
    for (std::int64_t st = 0; st < nstrips; ++st) {
      const float* b = strips + (st * patch + p0) * kNR;
      for (std::int64_t i = i0; i < i1; ++i)
        cpu::avx512_tile(panels + (i * patch + p0) * kMR, b, kc, out + i * kMR * ldo + st * kNR, ldo, 1.f, p0 > 0,
                         kMR, kNR);
    }
  }
}

// A band's GEMM output out (k, len; row stride ldo) into y's rows [j0, j0 + len) of one image (plane pixels a
// channel), plus the bias; added to what y holds with Accumulate::Add. The GEMM writes a dense
// buffer rather than y itself: y's rows lie a power of two apart (256 KB at 256 x 256), and
// Eigen's zeroing and updating of a tile strided so ran through L2 as through one set.
void store_band(const float* out, std::int64_t ldo, std::int64_t k, std::int64_t len, const float* bias,
                Accumulate acc, std::int64_t plane, std::int64_t j0, float* y) {
  for (std::int64_t i = 0; i < k; ++i) {
    const float* o = out + i * ldo;
    float* yk = y + i * plane + j0;
    const float b = bias != nullptr ? bias[i] : 0.f;
    if (acc == Accumulate::Add) {
      for (std::int64_t j = 0; j < len; ++j) yk[j] += o[j] + b;
    } else {
      for (std::int64_t j = 0; j < len; ++j) yk[j] = o[j] + b;
    }
  }
}

// store_band's overwrite for the AVX-512 path with streaming stores where y's rows allow them:
// a large output is not read again before it has left the cache, and a plain store would first
// read every line of it from memory.
__attribute__((target("avx512f"))) void store_band_stream(const float* out, std::int64_t ldo, std::int64_t k,
                                                          std::int64_t len, const float* bias, std::int64_t plane,
                                                          std::int64_t j0, float* y) {
  for (std::int64_t i = 0; i < k; ++i) {
    const float* o = out + i * ldo;
    float* yk = y + i * plane + j0;
    const float b = bias != nullptr ? bias[i] : 0.f;
    std::int64_t j = 0;
    for (; j < len && reinterpret_cast<std::uintptr_t>(yk + j) % 64 != 0; ++j) yk[j] = o[j] + b;
    const __m512 bv = _mm512_set1_ps(b);
    for (; j + 16 <= len; j += 16) _mm512_stream_ps(yk + j, _mm512_add_ps(_mm512_loadu_ps(o + j), bv));
    for (; j < len; ++j) yk[j] = o[j] + b;
  }
  _mm_sfence();
}

// The sum of x[i] - center (Squares: of (x[i] - center)^2) over n floats, in double: eight
// independent partial sums, so the loop vectorizes instead of waiting on one serial chain of adds.
template <bool Squares>
__attribute__((always_inline)) inline double sum_f64(const float* x, std::int64_t n, double center) {
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

// One GroupNorm group: x (channels, len) contiguous, its statistics in double, then y = the
// normalized (and activated) values, y possibly x. Compiled twice: for every x86-64 with AVX2 and,
// the same arithmetic 16 lanes wide, for AVX-512F.
__attribute__((always_inline)) inline void norm_group_impl(const float* xg, std::int64_t channels, std::int64_t len,
                                                          const float* gamma, const float* beta, float eps, bool silu,
                                                          float* yg) {
  const std::int64_t count = channels * len;
  const double mean = count > 0 ? sum_f64<false>(xg, count, 0.0) / static_cast<double>(count) : 0.0;
  const double var = count > 0 ? sum_f64<true>(xg, count, mean) / static_cast<double>(count) : 0.0;
  const float rstd = math::norm_rstd(var, eps), m = static_cast<float>(mean);
  for (std::int64_t c = 0; c < channels; ++c) {
    const float* xc = xg + c * len;
    float* yc = yg + c * len;
    const float gc = gamma[c], bc = beta[c];
    // Each value in place of its own (y may be x): vector lanes never mix elements.
    if (silu) {
#pragma omp simd
      for (std::int64_t i = 0; i < len; ++i) yc[i] = math::group_norm_out(xc[i], m, rstd, gc, bc, true);
    } else {
#pragma omp simd
      for (std::int64_t i = 0; i < len; ++i) yc[i] = math::group_norm_out(xc[i], m, rstd, gc, bc, false);
    }
  }
}
void norm_group(const float* xg, std::int64_t channels, std::int64_t len, const float* gamma, const float* beta,
                float eps, bool silu, float* yg) {
  norm_group_impl(xg, channels, len, gamma, beta, eps, silu, yg);
}
__attribute__((target("avx512f,prefer-vector-width=512"))) void norm_group_avx512(
    const float* xg, std::int64_t channels, std::int64_t len, const float* gamma, const float* beta, float eps,
    bool silu, float* yg) {
  norm_group_impl(xg, channels, len, gamma, beta, eps, silu, yg);
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
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  if (use_avx512()) {
    // Work items: (band, range of weight panels); with fewer bands than threads a band's panels
    // are split between threads (each packing the band's patches itself).
    const std::int64_t panels = (s.k + kMR - 1) / kMR;
    const std::int64_t parts = std::min(panels, tiles >= threads ? 1 : (threads + tiles - 1) / tiles);
    const std::int64_t per_part = (panels + parts - 1) / parts, nstrips_max = (band_cols + kNR - 1) / kNR;
    const bool stream = acc == Accumulate::Overwrite && s.n * s.k * plane * std::int64_t(sizeof(float)) >= kStreamBytes;
    float* packed = cpu::thread_scratch(2, static_cast<std::size_t>(panels * kMR * patch));
    pack_weights(pw, s.k, patch, packed);
    auto run = [&](std::int64_t item) {
      const std::int64_t t = item / parts, part = item % parts;
      const std::int64_t i0 = part * per_part, i1 = std::min(panels, i0 + per_part);
      if (i0 >= i1) return;
      const std::int64_t n = t / per_image, b0 = (t % per_image) * band;
      const float* xn = px + n * s.c * s.h * s.w;
      const std::int64_t rows = direct ? 1 : std::min(band, s.oh - b0);
      const std::int64_t cols = direct ? std::min(band, plane - b0) : rows * s.ow, j0 = direct ? b0 : b0 * s.ow;
      const std::int64_t nstrips = (cols + kNR - 1) / kNR;
      float* strips = cpu::thread_scratch(0, static_cast<std::size_t>(nstrips_max * kNR * patch));
      float* out = cpu::thread_scratch(1, static_cast<std::size_t>(panels * kMR * nstrips_max * kNR));
      float* row = cpu::thread_scratch(3, static_cast<std::size_t>(band_cols));
      for (std::int64_t p = 0; p < patch; ++p) {
        if (direct) {
          put_row(strips, patch, p, 0, xn + p * plane + b0, cols, 0, cols);
          put_row(strips, patch, p, cols, nullptr, nstrips * kNR - cols, 0, 0);
        } else {
          im2col_strips(s, g, xn, b0, rows, p, patch, row, strips);
        }
      }
      band_gemm(packed, i0, i1, strips, nstrips, patch, out);
      const std::int64_t k0 = i0 * kMR, k1 = std::min(s.k, i1 * kMR);
      if (stream)
        store_band_stream(out + k0 * nstrips * kNR, nstrips * kNR, k1 - k0, cols, pb == nullptr ? nullptr : pb + k0,
                          plane, j0, py + (n * s.k + k0) * plane);
      else
        store_band(out + k0 * nstrips * kNR, nstrips * kNR, k1 - k0, cols, pb == nullptr ? nullptr : pb + k0, acc,
                   plane, j0, py + (n * s.k + k0) * plane);
    };
    const std::int64_t items = tiles * parts;
    if (items > 1 && threads > 1) {
#pragma omp parallel for schedule(dynamic, 1)
      for (std::int64_t it = 0; it < items; ++it) run(it);
    } else {
      for (std::int64_t it = 0; it < items; ++it) run(it);
    }
    return;
  }
  auto run = [&](std::int64_t t) {
    const std::int64_t n = t / per_image, b0 = (t % per_image) * band;
    const float* xn = px + n * s.c * s.h * s.w;
    float* out = cpu::thread_scratch(1, static_cast<std::size_t>(s.k * band_cols));
    if (direct) {
      const std::int64_t len = std::min(band, plane - b0);
      cpu_sgemm(Transpose::No, Transpose::No, s.k, len, s.c, 1.f, pw, s.c, xn + b0, plane, 0.f, out, len);
      store_band(out, len, s.k, len, pb, acc, plane, b0, py + n * s.k * plane);
    } else {
      const std::int64_t rows = std::min(band, s.oh - b0), cols = rows * s.ow;
      float* col = cpu::thread_scratch(0, static_cast<std::size_t>(patch * band_cols));
      im2col_rows(s, g, xn, b0, rows, col);
      cpu_sgemm(Transpose::No, Transpose::No, s.k, cols, patch, 1.f, pw, patch, col, cols, 0.f, out, cols);
      store_band(out, cols, s.k, cols, pb, acc, plane, b0 * s.ow, py + n * s.k * plane);
    }
  };
  // Whole bands per thread; with fewer bands than threads, one band after the other, each GEMM
  // then using every thread.
  if (tiles >= threads && threads > 1) {
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
  static const bool avx512 = __builtin_cpu_supports("avx512f") != 0;
#pragma omp parallel for schedule(static) if (s.n * s.c * s.len > 65536)
  for (std::int64_t u = 0; u < units; ++u) {
    const std::int64_t c0 = (u % groups) * per_group;
    // (n, group) is contiguous: channels c0.. of sample n.
    if (avx512)
      norm_group_avx512(px + u * count, per_group, s.len, pg + c0, pb + c0, eps, silu, py + u * count);
    else
      norm_group(px + u * count, per_group, s.len, pg + c0, pb + c0, eps, silu, py + u * count);
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
