// The image primitives of the FID Inception-V3 on every backend against loops in double: pool2d_fwd
// (max and both averages, strides, asymmetric windows and padding, the global pool), the bilinear
// resize (up, down, mixed, an axis kept), ReLU, and the channel copies that concatenate branches;
// and the shapes each refuses, named in the message. Tolerances: the project's rule (relative L2
// per tensor against float64: fp32 1e-4, bf16/fp16 2e-2).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/arena.h"
#include "core/philox.h"
#include "backend_params.h"
#include "backend_suite.h"
#include "io_test_util.h"
#include "reference_ops.h"
#include "value_checks.h"

namespace dit {

namespace {

using io_test::error_of;
using ref::i64;
using ref::Vec;

// ---- references in double ------------------------------------------------------------------
Vec pool_ref(const Vec& x, i64 n, i64 c, i64 h, i64 w, const PoolGeometry& g, PoolKind kind, i64* oh_out,
             i64* ow_out) {
  const i64 oh = (h + g.pad_top + g.pad_bottom - g.kh) / g.stride_h + 1;
  const i64 ow = (w + g.pad_left + g.pad_right - g.kw) / g.stride_w + 1;
  Vec y(static_cast<std::size_t>(n * c * oh * ow));
  for (i64 p = 0; p < n * c; ++p)
    for (i64 oy = 0; oy < oh; ++oy)
      for (i64 ox = 0; ox < ow; ++ox) {
        double sum = 0, best = -std::numeric_limits<double>::infinity();
        i64 inside = 0;
        for (i64 a = 0; a < g.kh; ++a)
          for (i64 b = 0; b < g.kw; ++b) {
            const i64 iy = oy * g.stride_h - g.pad_top + a, ix = ox * g.stride_w - g.pad_left + b;
            if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;  // padding: zero for sums, absent for max
            const double v = x[static_cast<std::size_t>((p * h + iy) * w + ix)];
            sum += v, best = std::max(best, v), ++inside;
          }
        const double mean = sum / (kind == PoolKind::AverageExcludingPadding ? double(inside) : double(g.kh * g.kw));
        y[static_cast<std::size_t>((p * oh + oy) * ow + ox)] = kind == PoolKind::Max ? best : mean;
      }
  *oh_out = oh;
  *ow_out = ow;
  return y;
}

// PyTorch's bilinear source position along one axis (align_corners=False), in double.
void taps_ref(i64 o, i64 in, i64 out, i64* i0, i64* i1, double* lambda) {
  const double src = std::max((double(o) + 0.5) * double(in) / double(out) - 0.5, 0.0);
  *i0 = std::min(static_cast<i64>(src), in - 1);
  *i1 = std::min(*i0 + 1, in - 1);
  *lambda = std::min(src - double(*i0), 1.0);
}

Vec resize_ref(const Vec& x, i64 planes, i64 h, i64 w, i64 oh, i64 ow) {
  Vec y(static_cast<std::size_t>(planes * oh * ow));
  for (i64 p = 0; p < planes; ++p)
    for (i64 oy = 0; oy < oh; ++oy)
      for (i64 ox = 0; ox < ow; ++ox) {
        i64 y0, y1, x0, x1;
        double ly, lx;
        taps_ref(oy, h, oh, &y0, &y1, &ly);
        taps_ref(ox, w, ow, &x0, &x1, &lx);
        auto at = [&](i64 r, i64 c) { return x[static_cast<std::size_t>((p * h + r) * w + c)]; };
        y[static_cast<std::size_t>((p * oh + oy) * ow + ox)] =
            (1 - ly) * ((1 - lx) * at(y0, x0) + lx * at(y0, x1)) + ly * ((1 - lx) * at(y1, x0) + lx * at(y1, x1));
      }
  return y;
}

// ---- the primitives on every backend ------------------------------------------------------
class image_pool_ops : public BackendSuite {
 protected:
  image_pool_ops() : BackendSuite(0x9001) {}
  // Every kind of pool at geometry g on x (n, c, h, w) of mean `mean` (negative: a zero taken
  // from the padding would win the maximum and raise the mean).
  void check_pool(i64 n, i64 c, i64 h, i64 w, const PoolGeometry& g, double mean, const std::string& what) {
    Vec x;
    const Tensor tx = input(Shape{n, c, h, w}, &x, 1.0, mean);
    const std::pair<PoolKind, const char*> kinds[] = {
        {PoolKind::Max, " max"},
        {PoolKind::AverageExcludingPadding, " average excluding padding"},
        {PoolKind::AverageIncludingPadding, " average including padding"}};
    for (const auto& [kind, name] : kinds) {
      i64 oh = 0, ow = 0;
      const Vec want = pool_ref(x, n, c, h, w, g, kind, &oh, &ow);
      const Tensor ty = poisoned(Shape{n, c, oh, ow});
      be().pool2d_fwd(tx, g, kind, ty);
      check_values(what + name, download(ty), want, tol());
    }
  }
  void check_resize(i64 n, i64 c, i64 h, i64 w, i64 oh, i64 ow, const std::string& what) {
    Vec x;
    const Tensor tx = input(Shape{n, c, h, w}, &x);
    const Tensor ty = poisoned(Shape{n, c, oh, ow});
    be().resize_bilinear(tx, ty);
    check_values(what, download(ty), resize_ref(x, n * c, h, w, oh, ow), tol());
  }
};

TEST_P(image_pool_ops, PoolsMatchLoopsInDouble) {
  check_pool(2, 3, 9, 9, PoolGeometry::square(3, 2), 0.0, "3x3 stride 2");                   // Inception's max pools
  check_pool(2, 3, 7, 6, PoolGeometry::square(3, 1, 1), -3.0, "3x3 stride 1 pad 1");          // its 'same' pools
  check_pool(1, 4, 8, 7, PoolGeometry{2, 3, 2, 1, 1, 0, 1, 1}, -3.0, "2x3 strides (2, 1) pad (1, 0, 1, 1)");
  check_pool(3, 5, 8, 8, PoolGeometry::global(8, 8), 0.5, "global 8x8");                     // the final pool
  check_pool(2, 2, 5, 11, PoolGeometry::global(5, 11), 0.5, "global 5x11");
}

TEST_P(image_pool_ops, PoolExcludingPaddingDividesByInImagePixels) {
  // The corner of a 3x3 'same' average over a constant map is the constant, not 4/9 of it; with
  // the padding counted it is 4/9 of it. Max of an all-negative map ignores the zero padding.
  std::vector<float> twos(2 * 3 * 3, -2.f);
  const Tensor x = arena_->tensor(Shape{2, 1, 3, 3}, be_->compute_dtype());
  be().copy(x, Tensor{twos.data(), DType::F32, x.shape, Device::Host});
  const Tensor y = poisoned(Shape{2, 1, 3, 3});
  be().pool2d_fwd(x, PoolGeometry::square(3, 1, 1), PoolKind::AverageExcludingPadding, y);
  EXPECT_EQ(download(y)[0], -2.f);
  be().pool2d_fwd(x, PoolGeometry::square(3, 1, 1), PoolKind::AverageIncludingPadding, y);
  EXPECT_NEAR(download(y)[0], -2.f * 4 / 9, 1e-2);
  be().pool2d_fwd(x, PoolGeometry::square(3, 1, 1), PoolKind::Max, y);
  EXPECT_EQ(download(y)[8], -2.f);
}

TEST_P(image_pool_ops, ResizeMatchesLoopsInDouble) {
  check_resize(2, 3, 32, 32, 299, 299, "32x32 -> 299x299 (set a of the FID test)");
  check_resize(1, 3, 28, 28, 299, 299, "28x28 -> 299x299 (Fashion-MNIST)");
  check_resize(2, 2, 13, 9, 5, 7, "13x9 -> 5x7 (down)");
  check_resize(1, 2, 6, 7, 6, 15, "6x7 -> 6x15 (rows kept)");
  check_resize(1, 1, 1, 4, 3, 8, "1x4 -> 3x8 (one source row)");
}

TEST_P(image_pool_ops, ReluClampsNegatives) {
  Vec x;
  const Tensor tx = input(Shape{2, 3, 5, 7}, &x, 1.0, 0.2);
  Vec want(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) want[i] = std::max(x[i], 0.0);
  const Tensor ty = poisoned(Shape{2, 3, 5, 7});
  be().relu_fwd(tx, ty);
  const std::vector<float> got = download(ty);
  for (std::size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], static_cast<float>(want[i])) << "element " << i;
  be().relu_fwd(tx, tx);  // in place
  EXPECT_EQ(download(tx), got);
  EXPECT_NE(std::count(got.begin(), got.end(), 0.f), 0) << "no negative input was clamped";
}

TEST_P(image_pool_ops, CopyChannelsFillsASliceOfEachImage) {
  // Two branches of 2 and 3 channels into dst (3, 6, 4, 5) at offsets 0 and 3; channel 2 keeps
  // what dst held.
  Vec a, b, d0;
  const Tensor ta = input(Shape{3, 2, 4, 5}, &a), tb = input(Shape{3, 3, 4, 5}, &b);
  const Tensor td = input(Shape{3, 6, 4, 5}, &d0);
  be().copy_channels(ta, td, 0);
  be().copy_channels(tb, td, 3);
  Vec want = d0;
  const std::size_t plane = 20;
  for (std::size_t i = 0; i < 3; ++i) {
    std::copy_n(a.begin() + i * 2 * plane, 2 * plane, want.begin() + i * 6 * plane);
    std::copy_n(b.begin() + i * 3 * plane, 3 * plane, want.begin() + i * 6 * plane + 3 * plane);
  }
  const std::vector<float> got = download(td);
  for (std::size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], static_cast<float>(want[i])) << "element " << i;
}

TEST_P(image_pool_ops, BadShapesAreRefusedNamingThem) {
  Vec h;
  const Tensor x = input(Shape{2, 3, 7, 7}, &h);
  const auto pool_error = [&](const PoolGeometry& g, Shape y) {
    return error_of([&] { be().pool2d_fwd(x, g, PoolKind::Max, poisoned(y)); });
  };
  const PoolGeometry g = PoolGeometry::square(3, 2);
  const std::string wrong_y = pool_error(g, Shape{2, 3, 4, 3});
  EXPECT_NE(wrong_y.find("pool2d: x(2, 3, 7, 7) y(2, 3, 4, 3) window (3, 3) stride (2, 2)"), std::string::npos);
  EXPECT_NE(wrong_y.find("y must be (2, 3, 3, 3)"), std::string::npos);
  EXPECT_NE(pool_error(PoolGeometry::square(3, 1, 2), Shape{2, 3, 9, 9}).find("between 0 and half the window"),
            std::string::npos);
  EXPECT_NE(pool_error(PoolGeometry::global(8, 8), Shape{2, 3, 1, 1}).find("the window must fit"), std::string::npos);
  EXPECT_NE(error_of([&] { be().resize_bilinear(x, poisoned(Shape{2, 4, 9, 9})); })
                .find("resize_bilinear: x(2, 3, 7, 7) y(2, 4, 9, 9)"),
            std::string::npos);
  EXPECT_NE(error_of([&] { be().copy_channels(x, poisoned(Shape{2, 5, 7, 7}), 3); })
                .find("copy_channels: src(2, 3, 7, 7) into dst(2, 5, 7, 7) at channel 3"),
            std::string::npos);
  EXPECT_NE(error_of([&] { be().copy_channels(x, poisoned(Shape{1, 6, 7, 7}), 0); }).find("dst(1, 6, 7, 7)"),
            std::string::npos);
  EXPECT_NE(error_of([&] { be().relu_fwd(x, poisoned(Shape{2, 3, 7, 6})); }).find("relu"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Backends, image_pool_ops, all_backends(), backend_test_name);

}  // namespace

}  // namespace dit
