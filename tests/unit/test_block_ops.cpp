// Conformance of the block-variant primitives (SwiGLU gate, RMSNorm + modulate, per-head q/k
// norm, 2-D RoPE) on every backend against float64 references written here from LightningDiT's
// formulas (not from math.h); every backward against central differences of the float64 forward.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/arena.h"
#include "core/philox.h"
#include "backend_params.h"
#include "reference_ops.h"
#include "value_checks.h"

namespace dit {
namespace {

using ref::i64;
using ref::Vec;

// ---- float64 references --------------------------------------------------------------------

double silu(double x) { return x / (1.0 + std::exp(-x)); }

// h (R, F) = silu(x1) x2, x12 (R, 2F)
Vec swiglu(const Vec& x12, i64 f) {
  const i64 rows = static_cast<i64>(x12.size()) / (2 * f);
  Vec h(rows * f);
  for (i64 r = 0; r < rows; ++r)
    for (i64 i = 0; i < f; ++i) h[r * f + i] = silu(x12[r * 2 * f + i]) * x12[r * 2 * f + f + i];
  return h;
}

// y = x / sqrt(mean(x^2) + eps) * w * (1 + scale_n) + shift_n; mod (N, K*D), chunks ish, isc.
Vec rms_modulate(const Vec& x, const Vec& w, const Vec& mod, i64 n, i64 t, i64 d, i64 k, int ish,
                 int isc, double eps) {
  Vec y(x.size());
  for (i64 row = 0; row < n * t; ++row) {
    double ss = 0;
    for (i64 i = 0; i < d; ++i) ss += x[row * d + i] * x[row * d + i];
    const double r = 1.0 / std::sqrt(ss / d + eps);
    const i64 s = row / t;
    for (i64 i = 0; i < d; ++i)
      y[row * d + i] = x[row * d + i] * r * w[i] * (1 + mod[s * k * d + isc * d + i]) +
                       mod[s * k * d + ish * d + i];
  }
  return y;
}

// The per-head norm of q and k of qkv (rows, 3 H E); v copied. LayerNorm when centered.
Vec head_norm(const Vec& qkv, i64 rows, i64 h, i64 e, const Vec& qw, const Vec& qb, const Vec& kw,
              const Vec& kb, bool centered, double eps) {
  Vec y = qkv;
  for (i64 row = 0; row < rows; ++row)
    for (int part = 0; part < 2; ++part)
      for (i64 hh = 0; hh < h; ++hh) {
        const i64 o = row * 3 * h * e + (part * h + hh) * e;
        double mu = 0, v = 0;
        if (centered)
          for (i64 i = 0; i < e; ++i) mu += qkv[o + i] / e;
        for (i64 i = 0; i < e; ++i) v += (qkv[o + i] - mu) * (qkv[o + i] - mu) / e;
        const double r = 1.0 / std::sqrt(v + eps);
        const Vec& w = part == 0 ? qw : kw;
        const Vec& b = part == 0 ? qb : kb;
        for (i64 i = 0; i < e; ++i) y[o + i] = (qkv[o + i] - mu) * r * w[i] + (centered ? b[i] : 0.0);
      }
  return y;
}

// EVA-02's VisionRotaryEmbeddingFast as LightningDiT builds it (dim = E/2, pt_seq_len = grid),
// written as its tensors are: freqs (grid, E/4) repeated per adjacent pair, broadcat of the row
// and column halves, then t * cos + rotate_half(t) * sin on q and k.
Vec rope(const Vec& qkv, i64 n, i64 grid, i64 h, i64 e, double sign) {
  const i64 t = grid * grid, dim = e / 2;
  std::vector<double> cosv(t * e), sinv(t * e);
  for (i64 a = 0; a < grid; ++a)
    for (i64 b = 0; b < grid; ++b)
      for (i64 c = 0; c < e; ++c) {
        const i64 j = (c < dim ? c : c - dim) / 2;  // the repeated frequency's index
        const double f = 1.0 / std::pow(10000.0, 2.0 * j / dim);
        const double pos = c < dim ? a : b;
        cosv[(a * grid + b) * e + c] = std::cos(pos * f);
        sinv[(a * grid + b) * e + c] = std::sin(pos * f);
      }
  Vec y = qkv;
  for (i64 row = 0; row < n * t; ++row)
    for (i64 hh = 0; hh < 2 * h; ++hh) {
      const i64 o = row * 3 * h * e + hh * e, tok = row % t;
      for (i64 c = 0; c < e; ++c) {
        const double rot = c % 2 == 0 ? -qkv[o + c + 1] : qkv[o + c - 1];  // rotate_half
        y[o + c] = qkv[o + c] * cosv[tok * e + c] + rot * sign * sinv[tok * e + c];
      }
    }
  return y;
}

// ---- the fixture ---------------------------------------------------------------------------

class BlockOps : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::string why;
    if (!backend_available(GetParam(), &why))
      GTEST_SKIP() << "backend '" << GetParam() << "' is not available: " << why;
    backend_ = make_backend(GetParam());
    arena_ = std::make_unique<Arena>(*backend_);
  }
  Backend& be() { return *backend_; }
  DType dt() const { return backend_->compute_dtype(); }
  double tol() const { return ref::tolerance(dt()); }

  std::vector<float> download(const Tensor& t) {
    std::vector<float> h(static_cast<std::size_t>(t.numel()));
    be().copy(Tensor{h.data(), DType::F32, t.shape, Device::Host}, t);
    be().synchronize();
    return h;
  }
  // A backend tensor of dtype `t` holding v; v becomes the values it holds after the conversion.
  Tensor upload(Shape s, Vec& v, DType t) {
    Tensor x = arena_->tensor(s, t);
    std::vector<float> f(v.begin(), v.end());
    be().copy(x, Tensor{f.data(), DType::F32, s, Device::Host});
    const auto held = download(x);
    v.assign(held.begin(), held.end());
    return x;
  }
  Tensor random(Shape s, Vec& v, double stddev = 1.0, double mean = 0.0) {
    Philox rng(0xb10c5ull, RngPurpose::Test, 0, stream_++);
    v.resize(static_cast<std::size_t>(s.numel()));
    for (auto& x : v) x = static_cast<float>(mean + stddev * rng.normal());
    return upload(s, v, dt());
  }
  // An output of the compute dtype filled with NaN, so an element the op does not write shows.
  Tensor arena_tensor(Shape s) {
    Tensor x = arena_->tensor(s, dt());
    be().fill(x, NAN);
    return x;
  }
  Vec download_vec(const Tensor& t) {
    const auto f = download(t);
    return Vec(f.begin(), f.end());
  }
  Tensor zeros(Shape s, DType t) {
    Tensor x = arena_->tensor(s, t);
    be().fill(x, 0.f);
    return x;
  }
  void expect_close(const std::string& what, const Tensor& got, const Vec& want) {
    check_values(GetParam() + " " + what, download(got), want, tol());
  }

 private:
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Arena> arena_;
  std::uint64_t stream_ = 0;
};

TEST_P(BlockOps, SwigluForwardAndBackward) {
  const i64 rows = 2 * 7, f = 12;
  Vec x12, dh;
  Tensor tx = random({2, 7, 2 * f}, x12, 2.0), tdh = random({2, 7, f}, dh);
  Tensor h = arena_tensor({2, 7, f}), dx = arena_tensor({2, 7, 2 * f});
  be().swiglu_fwd(tx, h);
  expect_close("swiglu_fwd", h, swiglu(x12, f));
  be().swiglu_bwd(tx, tdh, dx);
  expect_close("swiglu_bwd vs finite differences", dx,
               ref::numeric_grad([&](const Vec& v) { return ref::dot(swiglu(v, f), dh); }, x12));
  (void)rows;
}

TEST_P(BlockOps, RmsModulateForwardAndBackward) {
  const i64 n = 3, t = 5, d = 12, k = 6;
  const double eps = 1e-6;
  Vec x, w, mod, r, dx0;
  Tensor tx = random({n, t, d}, x, 2.0, 0.3), tw = random({d}, w, 0.5, 1.0),
         tm = random({n, k * d}, mod, 0.5), tr = random({n, t, d}, r);
  Tensor y = arena_tensor({n, t, d}), rstd = zeros({n * t}, DType::F32);
  be().rms_modulate_fwd(tx, tw, {tm, 3}, {tm, 4}, static_cast<float>(eps), y, rstd);
  expect_close("rms_modulate_fwd", y, rms_modulate(x, w, mod, n, t, d, k, 3, 4, eps));
  // L = sum(y R): dx (added to dx0), dweight (accumulated onto 1), dshift, dscale.
  Tensor dx = random({n, t, d}, dx0), dmod = zeros({n, k * d}, dt());
  Tensor dw = zeros({d}, DType::F32);
  be().fill(dw, 1.f);
  be().rms_modulate_bwd(tr, tx, rstd, tw, {tm, 4}, dx, Accumulate::Add, dw, {dmod, 3}, {dmod, 4});
  auto loss = [&](const Vec& xv, const Vec& wv, const Vec& mv) {
    return ref::dot(rms_modulate(xv, wv, mv, n, t, d, k, 3, 4, eps), r);
  };
  Vec want_dx = ref::numeric_grad([&](const Vec& v) { return loss(v, w, mod); }, x);
  for (std::size_t i = 0; i < want_dx.size(); ++i) want_dx[i] += dx0[i];
  expect_close("rms_modulate_bwd dx (accumulated)", dx, want_dx);
  Vec want_dw = ref::numeric_grad([&](const Vec& v) { return loss(x, v, mod); }, w);
  for (auto& v : want_dw) v += 1.0;
  check_values(GetParam() + " rms_modulate_bwd dweight (accumulated, fp32)", download(dw), want_dw,
               tol());
  const Vec dmod_fd = ref::numeric_grad([&](const Vec& v) { return loss(x, w, v); }, mod);
  expect_close("rms_modulate_bwd dshift, dscale", dmod, dmod_fd);
}

struct HeadNormCase {
  HeadNormKind kind;
  double eps;
  const char* name;
};

TEST_P(BlockOps, HeadNormForwardAndBackward) {
  const i64 n = 2, t = 4, h = 3, e = 8, rows = n * t;
  for (const HeadNormCase c : {HeadNormCase{HeadNormKind::RmsNorm, 1e-6, "rmsnorm"},
                               HeadNormCase{HeadNormKind::LayerNorm, 1e-5, "layernorm"}}) {
    const bool ln = c.kind == HeadNormKind::LayerNorm;
    Vec qkv, qw, qb, kw, kb, r;
    Tensor tq = random({n, t, 3 * h * e}, qkv, 1.5, 0.4), tr = random({n, t, 3 * h * e}, r);
    HeadNorm p{c.kind, static_cast<float>(c.eps), random({e}, qw, 0.5, 1.0), Tensor{},
               random({e}, kw, 0.5, 1.0), Tensor{}};
    if (ln) p.q_b = random({e}, qb, 0.5), p.k_b = random({e}, kb, 0.5);
    if (!ln) qb.assign(e, 0.0), kb.assign(e, 0.0);
    Tensor out = arena_tensor({n, t, 3 * h * e});
    Tensor mean = zeros({rows, 2, h}, DType::F32), rstd = zeros({rows, 2, h}, DType::F32);
    be().head_norm_fwd(tq, static_cast<int>(h), p, out, mean, rstd);
    auto fwd = [&](const Vec& x, const Vec& a, const Vec& b, const Vec& cc, const Vec& dd) {
      return head_norm(x, rows, h, e, a, b, cc, dd, ln, c.eps);
    };
    expect_close(std::string("head_norm_fwd ") + c.name, out, fwd(qkv, qw, qb, kw, kb));
    HeadNormGrads g{zeros({e}, DType::F32), ln ? zeros({e}, DType::F32) : Tensor{},
                    zeros({e}, DType::F32), ln ? zeros({e}, DType::F32) : Tensor{}};
    Tensor dq = arena_tensor({n, t, 3 * h * e});
    be().head_norm_bwd(tr, tq, mean, rstd, static_cast<int>(h), p, g, dq);
    expect_close(std::string("head_norm_bwd dqkv ") + c.name, dq,
                 ref::numeric_grad([&](const Vec& v) { return ref::dot(fwd(v, qw, qb, kw, kb), r); }, qkv));
    const double wtol = tol();
    check_values(std::string(c.name) + " q_norm weight grad", download(g.q_w),
                 ref::numeric_grad([&](const Vec& v) { return ref::dot(fwd(qkv, v, qb, kw, kb), r); }, qw), wtol);
    check_values(std::string(c.name) + " k_norm weight grad", download(g.k_w),
                 ref::numeric_grad([&](const Vec& v) { return ref::dot(fwd(qkv, qw, qb, v, kb), r); }, kw), wtol);
    if (ln) {
      check_values("layernorm q_norm bias grad", download(g.q_b),
                   ref::numeric_grad([&](const Vec& v) { return ref::dot(fwd(qkv, qw, v, kw, kb), r); }, qb), wtol);
      check_values("layernorm k_norm bias grad", download(g.k_b),
                   ref::numeric_grad([&](const Vec& v) { return ref::dot(fwd(qkv, qw, qb, kw, v), r); }, kb), wtol);
    }
    // In place (dqkv aliases dout), as the block calls it.
    be().head_norm_bwd(tr, tq, mean, rstd, static_cast<int>(h), p, g, tr);
    expect_close(std::string("head_norm_bwd in place ") + c.name, tr, download_vec(dq));
  }
}

TEST_P(BlockOps, RopeForwardAndBackward) {
  const i64 n = 2, grid = 3, t = grid * grid, h = 2, e = 8;
  Vec qkv, r;
  Tensor tq = random({n, t, 3 * h * e}, qkv, 1.5), tr = random({n, t, 3 * h * e}, r);
  Tensor out = arena_tensor({n, t, 3 * h * e});
  be().rope_fwd(tq, static_cast<int>(h), static_cast<int>(grid), out);
  expect_close("rope_fwd", out, rope(qkv, n, grid, h, e, 1.0));
  Tensor dq = arena_tensor({n, t, 3 * h * e});
  be().rope_bwd(tr, static_cast<int>(h), static_cast<int>(grid), dq);
  expect_close("rope_bwd vs finite differences", dq,
               ref::numeric_grad([&](const Vec& v) { return ref::dot(rope(v, n, grid, h, e, 1.0), r); }, qkv));
  be().rope_fwd(tq, static_cast<int>(h), static_cast<int>(grid), tq);  // in place
  expect_close("rope_fwd in place", tq, rope(qkv, n, grid, h, e, 1.0));
  EXPECT_THROW(be().rope_fwd(tq, static_cast<int>(h), 2, out), Error);  // 9 tokens, not 2 x 2
}

INSTANTIATE_TEST_SUITE_P(AllBackends, BlockOps, all_backends(), backend_test_name);

}  // namespace
}  // namespace dit
