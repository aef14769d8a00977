// Resize, pooling and concatenation for Inception-V3 (see inception_ops.h). Loops are parallel over
// (image, channel) planes, which no two iterations share.
#include "eval/inception_ops.h"

#include <algorithm>
#include <limits>

#include "core/error.h"

namespace dit::eval {

namespace {

// One axis of the resize: the two source indices and weights of each output index, computed in
// float as PyTorch's upsample_bilinear2d does.
struct Taps {
  std::vector<int> i0, i1;
  std::vector<float> w0, w1;
};

Taps taps(int in, int out) {
  Taps t;
  const std::size_t n = std::size_t(out);
  t.i0.resize(n), t.i1.resize(n), t.w0.resize(n), t.w1.resize(n);
  const float scale = static_cast<float>(in) / static_cast<float>(out);
  for (int o = 0; o < out; ++o) {
    const std::size_t k = std::size_t(o);
    if (in == out) {
      t.i0[k] = t.i1[k] = o, t.w0[k] = 1.f, t.w1[k] = 0.f;
      continue;
    }
    const float src = std::max(scale * (static_cast<float>(o) + 0.5f) - 0.5f, 0.f);
    const int i = std::min(static_cast<int>(src), in - 1);
    const float lambda = std::clamp(src - static_cast<float>(i), 0.f, 1.f);
    t.i0[k] = i, t.i1[k] = i + (i < in - 1 ? 1 : 0), t.w1[k] = lambda, t.w0[k] = 1.f - lambda;
  }
  return t;
}

}  // namespace

FeatureMaps resize_bilinear(const FeatureMaps& x, int oh, int ow) {
  DIT_CHECK(x.h >= 1 && x.w >= 1 && oh >= 1 && ow >= 1, "resize_bilinear: ", x.h, "x", x.w, " -> ", oh, "x", ow);
  const Taps ty = taps(x.h, oh), tx = taps(x.w, ow);
  FeatureMaps y(x.n, x.c, oh, ow);
#pragma omp parallel for schedule(static)
  for (std::int64_t p = 0; p < std::int64_t(x.n) * x.c; ++p) {
    const float* in = x.v.data() + p * x.plane();
    float* out = y.v.data() + p * y.plane();
    for (int oy = 0; oy < oh; ++oy) {
      const float* r0 = in + std::int64_t(ty.i0[std::size_t(oy)]) * x.w;
      const float* r1 = in + std::int64_t(ty.i1[std::size_t(oy)]) * x.w;
      const float wy0 = ty.w0[std::size_t(oy)], wy1 = ty.w1[std::size_t(oy)];
      for (int ox = 0; ox < ow; ++ox) {
        const std::size_t k = std::size_t(ox);
        out[std::int64_t(oy) * ow + ox] = wy0 * (tx.w0[k] * r0[tx.i0[k]] + tx.w1[k] * r0[tx.i1[k]]) +
                                          wy1 * (tx.w0[k] * r1[tx.i0[k]] + tx.w1[k] * r1[tx.i1[k]]);
      }
    }
  }
  return y;
}

FeatureMaps pool3x3_same(const FeatureMaps& x, Pool3x3 kind) {
  FeatureMaps y(x.n, x.c, x.h, x.w);
#pragma omp parallel for schedule(static)
  for (std::int64_t p = 0; p < std::int64_t(x.n) * x.c; ++p) {
    const float* in = x.v.data() + p * x.plane();
    float* out = y.v.data() + p * x.plane();
    for (int oy = 0; oy < x.h; ++oy)
      for (int ox = 0; ox < x.w; ++ox) {
        const int y0 = std::max(oy - 1, 0), y1 = std::min(oy + 1, x.h - 1);
        const int x0 = std::max(ox - 1, 0), x1 = std::min(ox + 1, x.w - 1);
        float sum = 0.f, best = -std::numeric_limits<float>::infinity();
        for (int a = y0; a <= y1; ++a)
          for (int b = x0; b <= x1; ++b) {
            const float v = in[std::int64_t(a) * x.w + b];
            sum += v;
            best = std::max(best, v);
          }
        const float count = static_cast<float>((y1 - y0 + 1) * (x1 - x0 + 1));
        out[std::int64_t(oy) * x.w + ox] = kind == Pool3x3::Max ? best : sum / count;
      }
  }
  return y;
}

void relu_inplace(FeatureMaps& x) {
  const std::int64_t n = std::int64_t(x.v.size());
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; ++i) x.v[std::size_t(i)] = std::max(x.v[std::size_t(i)], 0.f);
}

FeatureMaps concat_channels(const std::vector<const FeatureMaps*>& parts) {
  DIT_CHECK(!parts.empty(), "concat_channels: no parts");
  const FeatureMaps& first = *parts.front();
  int c = 0;
  for (const FeatureMaps* p : parts) {
    DIT_CHECK(p->n == first.n && p->h == first.h && p->w == first.w, "concat_channels: part of ", p->n, "x", p->h,
              "x", p->w, " against ", first.n, "x", first.h, "x", first.w);
    c += p->c;
  }
  FeatureMaps y(first.n, c, first.h, first.w);
#pragma omp parallel for schedule(static)
  for (int img = 0; img < first.n; ++img) {
    float* dst = y.v.data() + std::int64_t(img) * c * y.plane();
    for (const FeatureMaps* p : parts) {
      const std::int64_t block = std::int64_t(p->c) * p->plane();
      const float* src = p->v.data() + img * block;
      std::copy(src, src + block, dst);
      dst += block;
    }
  }
  return y;
}

}  // namespace dit::eval
