// The evaluation networks' convolution and pooling against direct loops in double: forward and
// every gradient, with strides, padding and non-square kernels, and batches that span chunks.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "eval/conv.h"
#include "reference_ops.h"

namespace dit::eval {
namespace {

std::vector<float> random_vec(std::int64_t n, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

using ref::rel_l2;

// Index of input pixel (img, ci, y, x), or -1 outside the image (zero padding).
std::int64_t in_at(const ConvShape& s, int img, int ci, int y, int x) {
  if (y < 0 || y >= s.h || x < 0 || x >= s.w) return -1;
  return ((std::int64_t(img) * s.c + ci) * s.h + y) * s.w + x;
}

struct Direct {
  std::vector<double> y, dx, dw, db;
};

// y = conv(x, w) + b, and the gradients for dy, by the definition.
Direct direct_conv(const ConvShape& s, const std::vector<float>& x, const std::vector<float>& w,
                   const std::vector<float>& b, const std::vector<float>& dy) {
  Direct r{std::vector<double>(s.out_size()), std::vector<double>(s.in_size()),
           std::vector<double>(s.weight_size()), std::vector<double>(s.k)};
  for (int img = 0; img < s.n; ++img)
    for (int kk = 0; kk < s.k; ++kk)
      for (int oy = 0; oy < s.oh(); ++oy)
        for (int ox = 0; ox < s.ow(); ++ox) {
          const std::int64_t o = ((std::int64_t(img) * s.k + kk) * s.oh() + oy) * s.ow() + ox;
          double acc = b[kk];
          r.db[kk] += dy[o];
          for (int ci = 0; ci < s.c; ++ci)
            for (int a = 0; a < s.kh; ++a)
              for (int bb = 0; bb < s.kw; ++bb) {
                const std::int64_t i = in_at(s, img, ci, oy * s.sh - s.ph + a, ox * s.sw - s.pw + bb);
                if (i < 0) continue;
                const std::int64_t wi = ((std::int64_t(kk) * s.c + ci) * s.kh + a) * s.kw + bb;
                acc += double(w[wi]) * x[i];
                r.dw[wi] += double(dy[o]) * x[i];
                r.dx[i] += double(dy[o]) * w[wi];
              }
          r.y[o] = acc;
        }
  return r;
}

void check_conv(const ConvShape& s) {
  const auto x = random_vec(s.in_size(), 1), w = random_vec(s.weight_size(), 2), b = random_vec(s.k, 3),
             dy = random_vec(s.out_size(), 4);
  const Direct want = direct_conv(s, x, w, b, dy);
  std::vector<float> y(s.out_size()), dx(s.in_size()), dw(s.weight_size()), db(s.k);
  conv2d_forward(s, x.data(), w.data(), b.data(), y.data());
  conv2d_backward(s, x.data(), w.data(), dy.data(), dx.data(), dw.data(), db.data());
  EXPECT_LT(rel_l2(y, want.y), 1e-6);
  EXPECT_LT(rel_l2(dx, want.dx), 1e-6);
  EXPECT_LT(rel_l2(dw, want.dw), 1e-6);
  EXPECT_LT(rel_l2(db, want.db), 1e-6);
}

TEST(EvalConv, SamePadding3x3) { check_conv({.n = 3, .c = 2, .h = 8, .w = 8, .k = 5, .kh = 3, .kw = 3, .ph = 1, .pw = 1}); }

TEST(EvalConv, StridedNonSquareKernel) {
  check_conv({.n = 2, .c = 3, .h = 11, .w = 9, .k = 4, .kh = 1, .kw = 7, .sh = 2, .sw = 1, .ph = 0, .pw = 3});
  check_conv({.n = 2, .c = 3, .h = 9, .w = 10, .k = 4, .kh = 3, .kw = 3, .sh = 2, .sw = 2});
}

// Enough images that the patch matrix is split into several chunks (about 32 MB each).
TEST(EvalConv, BatchSpanningChunks) {
  check_conv({.n = 300, .c = 8, .h = 32, .w = 32, .k = 2, .kh = 3, .kw = 3, .ph = 1, .pw = 1});
}

TEST(EvalConv, MaxPoolForwardBackward) {
  const PoolShape s{.n = 2, .c = 3, .h = 7, .w = 6, .k = 3, .stride = 2};
  const auto x = random_vec(std::int64_t(s.n) * s.c * s.h * s.w, 5), dy = random_vec(s.out_size(), 6);
  std::vector<float> y(s.out_size()), dx(x.size());
  std::vector<std::int32_t> arg(s.out_size());
  max_pool2d_forward(s, x.data(), y.data(), arg.data());
  max_pool2d_backward(s, dy.data(), arg.data(), dx.data());
  std::vector<double> want_dx(x.size());
  for (int p = 0; p < s.n * s.c; ++p)
    for (int oy = 0; oy < s.oh(); ++oy)
      for (int ox = 0; ox < s.ow(); ++ox) {
        std::int64_t best = -1;
        for (int a = 0; a < s.k; ++a)
          for (int b = 0; b < s.k; ++b) {
            const std::int64_t i = (std::int64_t(p) * s.h + oy * s.stride + a) * s.w + ox * s.stride + b;
            if (best < 0 || x[i] > x[best]) best = i;
          }
        const std::int64_t o = (std::int64_t(p) * s.oh() + oy) * s.ow() + ox;
        EXPECT_EQ(y[o], x[best]);
        want_dx[best] += dy[o];
      }
  EXPECT_LT(rel_l2(dx, want_dx), 1e-7);
}

}  // namespace
}  // namespace dit::eval
