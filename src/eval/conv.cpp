// Convolution as im2col + one GEMM per chunk of images: the chunk's patches form a
// (c*kh*kw, images*oh*ow) matrix, so the weight multiplies them all in one product, the
// fixed-order GEMM (backend/cpu/ordered_gemm.h): the same bits at any thread count on any CPU.
// Chunks bound the patch matrix to about 32 MB, whatever the batch.
#include "eval/conv.h"

#include <algorithm>
#include <limits>

#include "backend/cpu/ordered_gemm.h"

namespace dit::eval {

namespace {

constexpr std::int64_t kMaxColFloats = std::int64_t(8) << 20;

int images_per_chunk(const ConvShape& s) {
  const std::int64_t per_image = std::int64_t(s.c) * s.kh * s.kw * s.oh() * s.ow();
  return int(std::clamp<std::int64_t>(kMaxColFloats / std::max<std::int64_t>(per_image, 1), 1, s.n));
}

// col (c*kh*kw, nb*oh*ow) from images [i0, i0 + nb) of x.
void im2col(const ConvShape& s, const float* x, int i0, int nb, float* col) {
  const int oh = s.oh(), ow = s.ow();
  const std::int64_t cols = std::int64_t(nb) * oh * ow;
#pragma omp parallel for collapse(2) schedule(static)
  for (int ci = 0; ci < s.c; ++ci)
    for (int img = 0; img < nb; ++img) {
      const float* plane = x + ((std::int64_t(i0) + img) * s.c + ci) * s.h * s.w;
      for (int a = 0; a < s.kh; ++a)
        for (int b = 0; b < s.kw; ++b) {
          float* dst = col + ((std::int64_t(ci) * s.kh + a) * s.kw + b) * cols + std::int64_t(img) * oh * ow;
          for (int oy = 0; oy < oh; ++oy) {
            const int iy = oy * s.sh - s.ph + a;
            float* row = dst + std::int64_t(oy) * ow;
            if (iy < 0 || iy >= s.h) {
              std::fill(row, row + ow, 0.f);
              continue;
            }
            const float* src = plane + std::int64_t(iy) * s.w;
            for (int ox = 0; ox < ow; ++ox) {
              const int ix = ox * s.sw - s.pw + b;
              row[ox] = (ix >= 0 && ix < s.w) ? src[ix] : 0.f;
            }
          }
        }
    }
}

// The adjoint of im2col: adds each patch entry of dcol back into dx (zeroed by the caller).
// Parallel over (image, channel) planes, which no two iterations share.
void col2im(const ConvShape& s, const float* dcol, int i0, int nb, float* dx) {
  const int oh = s.oh(), ow = s.ow();
  const std::int64_t cols = std::int64_t(nb) * oh * ow;
#pragma omp parallel for collapse(2) schedule(static)
  for (int ci = 0; ci < s.c; ++ci)
    for (int img = 0; img < nb; ++img) {
      float* plane = dx + ((std::int64_t(i0) + img) * s.c + ci) * s.h * s.w;
      for (int a = 0; a < s.kh; ++a)
        for (int b = 0; b < s.kw; ++b) {
          const float* src =
              dcol + ((std::int64_t(ci) * s.kh + a) * s.kw + b) * cols + std::int64_t(img) * oh * ow;
          for (int oy = 0; oy < oh; ++oy) {
            const int iy = oy * s.sh - s.ph + a;
            if (iy < 0 || iy >= s.h) continue;
            float* dst = plane + std::int64_t(iy) * s.w;
            for (int ox = 0; ox < ow; ++ox) {
              const int ix = ox * s.sw - s.pw + b;
              if (ix >= 0 && ix < s.w) dst[ix] += src[std::int64_t(oy) * ow + ox];
            }
          }
        }
    }
}

}  // namespace

void conv2d_forward(const ConvShape& s, const float* x, const float* weight, const float* bias, float* y) {
  const std::int64_t ohw = std::int64_t(s.oh()) * s.ow(), ckk = std::int64_t(s.c) * s.kh * s.kw;
  const int chunk = images_per_chunk(s);
  std::vector<float> col(ckk * chunk * ohw), out(std::int64_t(s.k) * chunk * ohw);
  for (int i0 = 0; i0 < s.n; i0 += chunk) {
    const int nb = std::min(chunk, s.n - i0);
    const std::int64_t cols = nb * ohw;
    im2col(s, x, i0, nb, col.data());
    cpu_sgemm_ordered(Transpose::No, Transpose::No, s.k, cols, ckk, 1.f, weight, ckk, col.data(), cols, 0.f,
                      out.data(), cols);
#pragma omp parallel for collapse(2) schedule(static)
    for (int img = 0; img < nb; ++img)
      for (int kk = 0; kk < s.k; ++kk) {
        const float* src = out.data() + kk * cols + img * ohw;
        float* dst = y + ((std::int64_t(i0) + img) * s.k + kk) * ohw;
        const float b = bias ? bias[kk] : 0.f;
        for (std::int64_t p = 0; p < ohw; ++p) dst[p] = src[p] + b;
      }
  }
}

void conv2d_backward(const ConvShape& s, const float* x, const float* weight, const float* dy, float* dx,
                     float* dweight, float* dbias) {
  const std::int64_t ohw = std::int64_t(s.oh()) * s.ow(), ckk = std::int64_t(s.c) * s.kh * s.kw;
  const int chunk = images_per_chunk(s);
  std::vector<float> col(ckk * chunk * ohw), dyc(std::int64_t(s.k) * chunk * ohw);
  if (dx) std::fill(dx, dx + s.in_size(), 0.f);
  if (dbias) std::fill(dbias, dbias + s.k, 0.f);
  for (int i0 = 0; i0 < s.n; i0 += chunk) {
    const int nb = std::min(chunk, s.n - i0);
    const std::int64_t cols = nb * ohw;
    im2col(s, x, i0, nb, col.data());
#pragma omp parallel for schedule(static)
    for (int kk = 0; kk < s.k; ++kk) {
      double sum = 0;
      for (int img = 0; img < nb; ++img) {
        const float* src = dy + ((std::int64_t(i0) + img) * s.k + kk) * ohw;
        std::copy(src, src + ohw, dyc.data() + kk * cols + img * ohw);
        for (std::int64_t p = 0; p < ohw; ++p) sum += src[p];
      }
      if (dbias) dbias[kk] += float(sum);
    }
    cpu_sgemm_ordered(Transpose::No, Transpose::Yes, s.k, ckk, cols, 1.f, dyc.data(), cols, col.data(), cols,
                      i0 == 0 ? 0.f : 1.f, dweight, ckk);
    if (!dx) continue;
    // The patch matrix is no longer needed: its buffer takes the patch gradients.
    cpu_sgemm_ordered(Transpose::Yes, Transpose::No, ckk, cols, s.k, 1.f, weight, ckk, dyc.data(), cols, 0.f,
                      col.data(), cols);
    col2im(s, col.data(), i0, nb, dx);
  }
}

void max_pool2d_forward(const PoolShape& s, const float* x, float* y, std::int32_t* argmax) {
  const int oh = s.oh(), ow = s.ow();
#pragma omp parallel for schedule(static)
  for (std::int64_t plane = 0; plane < std::int64_t(s.n) * s.c; ++plane) {
    const float* in = x + plane * s.h * s.w;
    for (int oy = 0; oy < oh; ++oy)
      for (int ox = 0; ox < ow; ++ox) {
        float best = -std::numeric_limits<float>::infinity();
        std::int32_t at = 0;
        for (int a = 0; a < s.k; ++a)
          for (int b = 0; b < s.k; ++b) {
            const std::int32_t i = (oy * s.stride + a) * s.w + ox * s.stride + b;
            if (in[i] > best) best = in[i], at = i;
          }
        const std::int64_t o = plane * oh * ow + std::int64_t(oy) * ow + ox;
        y[o] = best;
        if (argmax) argmax[o] = at;
      }
  }
}

void max_pool2d_backward(const PoolShape& s, const float* dy, const std::int32_t* argmax, float* dx) {
  const std::int64_t per_out = std::int64_t(s.oh()) * s.ow(), per_in = std::int64_t(s.h) * s.w;
  std::fill(dx, dx + std::int64_t(s.n) * s.c * per_in, 0.f);
#pragma omp parallel for schedule(static)
  for (std::int64_t plane = 0; plane < std::int64_t(s.n) * s.c; ++plane)
    for (std::int64_t o = 0; o < per_out; ++o)
      dx[plane * per_in + argmax[plane * per_out + o]] += dy[plane * per_out + o];
}

}  // namespace dit::eval
