// Shape rules shared by every backend, and the per-sample losses built and checked once.
#include "backend/backend.h"

#include <algorithm>
#include <string>
#include <variant>

namespace dit {

GemmShape gemm_shape(const Tensor& a, Transpose ta, const Tensor& b, Transpose tb, const Tensor& c) {
  const int r = c.shape.rank;
  DIT_CHECK((r == 2 || r == 3) && a.shape.rank == r && b.shape.rank == r,
            "gemm takes 2-D or 3-D (batched) views of one rank; got A", a.shape.str(), " B",
            b.shape.str(), " C", c.shape.str());
  GemmShape g{r == 3 ? c.dim(0) : 1, c.dim(-2), c.dim(-1), 0, a.dim(-2), a.dim(-1), b.dim(-2), b.dim(-1)};
  DIT_CHECK(r == 2 || (a.dim(0) == g.batch && b.dim(0) == g.batch), "gemm batch mismatch: A",
            a.shape.str(), " B", b.shape.str(), " C", c.shape.str());
  g.k = ta == Transpose::No ? g.ac : g.ar;
  DIT_CHECK((ta == Transpose::No ? g.ar : g.ac) == g.m && (tb == Transpose::No ? g.br : g.bc) == g.k &&
                (tb == Transpose::No ? g.bc : g.br) == g.n,
            "gemm shapes do not agree: A", a.shape.str(), (ta == Transpose::Yes ? "^T" : ""), " B",
            b.shape.str(), (tb == Transpose::Yes ? "^T" : ""), " C", c.shape.str());
  return g;
}

ConvShape conv_shape(const Tensor& x, const Tensor& w, const ConvGeometry& g, const Tensor& y) {
  auto says = [&] {
    return "conv2d: x" + x.shape.str() + " w" + w.shape.str() + " y" + y.shape.str() + " stride (" +
           std::to_string(g.stride_h) + ", " + std::to_string(g.stride_w) + ") padding (" +
           std::to_string(g.pad_top) + ", " + std::to_string(g.pad_bottom) + ", " +
           std::to_string(g.pad_left) + ", " + std::to_string(g.pad_right) + ")";
  };
  DIT_CHECK(x.shape.rank == 4 && w.shape.rank == 4 && y.shape.rank == 4, says(),
            ": expected x (N, C, H, W), w (K, C, kh, kw), y (N, K, Ho, Wo)");
  DIT_CHECK(g.stride_h > 0 && g.stride_w > 0 && g.pad_top >= 0 && g.pad_bottom >= 0 && g.pad_left >= 0 &&
                g.pad_right >= 0,
            says(), ": strides must be positive and paddings not negative");
  ConvShape s{x.dim(0), x.dim(1), x.dim(2), x.dim(3), w.dim(0), w.dim(2), w.dim(3), 0, 0};
  const std::int64_t ph = s.h + g.pad_top + g.pad_bottom, pw = s.w + g.pad_left + g.pad_right;
  DIT_CHECK(w.dim(1) == s.c && s.kh > 0 && s.kw > 0 && ph >= s.kh && pw >= s.kw, says(),
            ": the kernel must take x's channels and fit the padded input");
  s.oh = (ph - s.kh) / g.stride_h + 1;
  s.ow = (pw - s.kw) / g.stride_w + 1;
  DIT_CHECK(y.dim(0) == s.n && y.dim(1) == s.k && y.dim(2) == s.oh && y.dim(3) == s.ow, says(),
            ": y must be (", s.n, ", ", s.k, ", ", s.oh, ", ", s.ow, ")");
  return s;
}

GroupNormShape group_norm_shape(const Tensor& x, int groups, const Tensor& gamma, const Tensor& beta,
                                const Tensor& y) {
  DIT_CHECK(x.shape.rank >= 2 && y.shape == x.shape && groups > 0 && x.dim(1) % groups == 0 &&
                gamma.numel() == x.dim(1) && beta.numel() == x.dim(1),
            "group_norm: x", x.shape.str(), " y", y.shape.str(), " gamma", gamma.shape.str(), " beta",
            beta.shape.str(), " in ", groups, " groups: expected x and y (N, C, ...) alike, C values of ",
            "gamma and beta, and groups dividing C");
  return {x.dim(0), x.dim(1), x.numel() / std::max<std::int64_t>(x.dim(0) * x.dim(1), 1)};
}

void check_upsample2x(const Tensor& x, const Tensor& y) {
  DIT_CHECK(x.shape.rank == 4 && y.shape.rank == 4 && y.dim(0) == x.dim(0) && y.dim(1) == x.dim(1) &&
                y.dim(2) == 2 * x.dim(2) && y.dim(3) == 2 * x.dim(3),
            "upsample_nearest2x: x", x.shape.str(), " y", y.shape.str(), ": expected y (N, C, 2H, 2W)");
}

Pool2dShape pool2d_shape(const Tensor& x, const PoolGeometry& g, const Tensor& y) {
  auto says = [&] {
    return "pool2d: x" + x.shape.str() + " y" + y.shape.str() + " window (" + std::to_string(g.kh) + ", " +
           std::to_string(g.kw) + ") stride (" + std::to_string(g.stride_h) + ", " + std::to_string(g.stride_w) +
           ") padding (" + std::to_string(g.pad_top) + ", " + std::to_string(g.pad_bottom) + ", " +
           std::to_string(g.pad_left) + ", " + std::to_string(g.pad_right) + ")";
  };
  DIT_CHECK(x.shape.rank == 4 && y.shape.rank == 4, says(), ": expected x (N, C, H, W) and y (N, C, Ho, Wo)");
  DIT_CHECK(g.kh > 0 && g.kw > 0 && g.stride_h > 0 && g.stride_w > 0, says(),
            ": windows and strides must be positive");
  DIT_CHECK(g.pad_top >= 0 && g.pad_bottom >= 0 && g.pad_left >= 0 && g.pad_right >= 0 && 2 * g.pad_top <= g.kh &&
                2 * g.pad_bottom <= g.kh && 2 * g.pad_left <= g.kw && 2 * g.pad_right <= g.kw,
            says(), ": padding must be between 0 and half the window");
  Pool2dShape s{x.dim(0), x.dim(1), x.dim(2), x.dim(3), 0, 0};
  const std::int64_t ph = s.h + g.pad_top + g.pad_bottom, pw = s.w + g.pad_left + g.pad_right;
  DIT_CHECK(ph >= g.kh && pw >= g.kw, says(), ": the window must fit the padded input");
  s.oh = (ph - g.kh) / g.stride_h + 1;
  s.ow = (pw - g.kw) / g.stride_w + 1;
  DIT_CHECK(y.dim(0) == s.n && y.dim(1) == s.c && y.dim(2) == s.oh && y.dim(3) == s.ow, says(), ": y must be (",
            s.n, ", ", s.c, ", ", s.oh, ", ", s.ow, ")");
  return s;
}

void check_resize(const Tensor& x, const Tensor& y) {
  DIT_CHECK(x.shape.rank == 4 && y.shape.rank == 4 && y.dim(0) == x.dim(0) && y.dim(1) == x.dim(1) &&
                x.dim(2) >= 1 && x.dim(3) >= 1 && y.dim(2) >= 1 && y.dim(3) >= 1,
            "resize_bilinear: x", x.shape.str(), " y", y.shape.str(),
            ": expected x (N, C, H, W) and y (N, C, Ho, Wo), every size at least 1");
}

void check_copy_channels(const Tensor& src, const Tensor& dst, std::int64_t offset) {
  DIT_CHECK(src.shape.rank == 4 && dst.shape.rank == 4 && src.dim(0) == dst.dim(0) && src.dim(2) == dst.dim(2) &&
                src.dim(3) == dst.dim(3) && offset >= 0 && offset + src.dim(1) <= dst.dim(1),
            "copy_channels: src", src.shape.str(), " into dst", dst.shape.str(), " at channel ", offset,
            ": expected src (N, c, H, W) and dst (N, C, H, W) with 0 <= offset and offset + c <= C");
}

void Backend::gemm_bias(const Tensor& a, Transpose ta, const Tensor& b, Transpose tb,
                        const Tensor& bias, const Tensor& c) {
  DIT_CHECK(c.shape.rank == 2 && bias.numel() == c.dim(1), "gemm_bias: a bias of ", bias.numel(),
            " values for C", c.shape.str(), " (2-D, one value per column)");
  gemm(a, ta, b, tb, c, Accumulate::Overwrite);
  add_rowwise(c, bias);
}

math::SampleLoss diffusion_loss_fn(const math::LossKind& kind, const Tensor& x0, float grad_scale) {
  const std::int64_t n = x0.shape.rank > 0 ? x0.dim(0) : 0, p = x0.numel() / std::max<std::int64_t>(n, 1);
  if (kind.target == math::LossTarget::Epsilon)
    return math::EpsilonLoss{p, kind, grad_scale * (1.0 / (static_cast<double>(p) * static_cast<double>(n)))};
  DIT_CHECK(!kind.learn_sigma() && x0.shape.rank == 4, "diffusion loss: velocity prediction takes data (N, C, H, W) "
            "and no learned variance; got x0 ", x0.shape.str(), ", learned variance ", kind.learn_sigma());
  const std::int64_t hw = x0.dim(2) * x0.dim(3);
  const double scale = grad_scale;
  return math::VelocityLoss{x0.dim(1), hw, kind.cosine, scale / (static_cast<double>(p) * static_cast<double>(n)),
                            scale / (static_cast<double>(hw) * static_cast<double>(n))};
}

math::SampleLoss output_distill_fn(const math::LossKind& kind, const Tensor& x0, const Tensor& tout,
                                   float grad_scale) {
  const std::int64_t n = x0.shape.rank > 0 ? x0.dim(0) : 0, p = x0.numel() / std::max<std::int64_t>(n, 1);
  const std::int64_t per_t = n > 0 ? tout.numel() / n : 0;
  DIT_CHECK((per_t == p || per_t == 2 * p) && tout.numel() == n * per_t && (!kind.learn_sigma() || per_t == 2 * p),
            "output distillation: teacher out ", tout.shape.str(), " does not fit x0 ", x0.shape.str(),
            " (learned variance: ", kind.learn_sigma(), ")");
  return math::OutputKdLoss{p, per_t, kind.learn_sigma(),
                            static_cast<double>(grad_scale) / (static_cast<double>(p) * static_cast<double>(n))};
}

math::SampleLoss feature_distill_fn(const Tensor& fs, double sigma, float grad_scale) {
  const std::int64_t n = fs.shape.rank > 0 ? fs.dim(0) : 0, m = n > 0 ? fs.numel() / n : 0;
  DIT_CHECK(m > 1, "feature distillation: student features ", fs.shape.str(), " hold fewer than 2 values a sample");
  return math::FeatureKdLoss{m, sigma,
                             static_cast<double>(grad_scale) / (static_cast<double>(m) * static_cast<double>(n))};
}

std::int64_t check_sample_loss(const math::SampleLoss& loss, const LossTensors& io) {
  const math::LossShape sh = std::visit([](const auto& f) { return f.shape(); }, loss);
  const char* name = std::visit([](const auto& f) { return f.kName; }, loss);
  const Tensor& lead = sh.x > 0 ? io.x0 : io.a;
  const std::int64_t n = lead.shape.rank > 0 ? lead.dim(0) : 0;
  const auto fits = [n](const Tensor& x, std::int64_t per) { return x.numel() == n * per; };
  DIT_CHECK(fits(io.a, sh.a) && io.grad.numel() == io.a.numel() && io.grad.dtype == io.a.dtype &&
                (sh.b == 0 || (fits(io.b, sh.b) && io.b.dtype == io.a.dtype)) &&
                (sh.x == 0 || (fits(io.x0, sh.x) && fits(io.noise, sh.x))) && fits(io.terms, sh.terms) &&
                io.terms.dtype == DType::F32,
            name, ": out ", io.a.shape.str(), ", teacher ", io.b.shape.str(), ", grad ", io.grad.shape.str(), ", x0 ",
            io.x0.shape.str(), ", noise ", io.noise.shape.str(), ", terms ", io.terms.shape.str(),
            " do not fit ", n, " samples of ", sh.a, " values (fp32 terms of ", sh.terms, ")");
  if (sh.uses_row) {
    DIT_CHECK(io.t.dtype == DType::I32 && io.t.numel() == n, "diffusion: t must be (", n,
              ") int32 schedule indices, got ", io.t.shape.str(), " ", dtype_name(io.t.dtype));
    DIT_CHECK(io.coefs.shape.rank == 2 && io.coefs.dim(1) == math::kNumLossCoefs, "diffusion: coefs ",
              io.coefs.shape.str(), " is not a (T, ", int(math::kNumLossCoefs), ") schedule table");
  }
  return n;
}

}  // namespace dit
