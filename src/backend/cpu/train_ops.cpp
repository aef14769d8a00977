// CPU backend: the training step's own primitives: keyed noise, q_sample and the diffusion loss
// over a microbatch (math.h's per-element functors), and the optimizer's one-pass norm and fused
// AdamW + EMA over a flat shard.
#include <cmath>
#include <numbers>
#include <utility>

#include "backend/cpu/cpu_backend.h"
#include "core/philox.h"

namespace dit {

namespace {

const float* f32(const Tensor& t, const char* what) {
  DIT_CHECK(t.device == Device::Host && t.dtype == DType::F32, what,
            ": the CPU backend needs an fp32 host tensor, got ", dtype_name(t.dtype));
  return static_cast<const float*>(t.data);
}
float* f32_out(const Tensor& t, const char* what) { return const_cast<float*>(f32(t, what)); }

// The schedule rows of a microbatch's samples, checked against the table.
struct LossRows {
  const float* table;
  const std::int32_t* t;
  std::int64_t steps;
  const float* row(std::int64_t i) const {
    DIT_CHECK(t[i] >= 0 && t[i] < steps, "diffusion: timestep ", t[i], " outside the schedule's ",
              steps, " steps");
    return table + static_cast<std::int64_t>(t[i]) * math::kNumLossCoefs;
  }
};

LossRows loss_rows(const Tensor& t, const Tensor& coefs, std::int64_t n) {
  DIT_CHECK(t.dtype == DType::I32 && t.numel() == n, "diffusion: t must be (", n,
            ") int32 schedule indices, got ", t.shape.str(), " ", dtype_name(t.dtype));
  DIT_CHECK(coefs.shape.rank == 2 && coefs.dim(1) == math::kNumLossCoefs, "diffusion: coefs ",
            coefs.shape.str(), " is not a (T, ", int(math::kNumLossCoefs), ") schedule table");
  return {f32(coefs, "diffusion coefs"), static_cast<const std::int32_t*>(t.data), coefs.dim(0)};
}

}  // namespace

void CpuBackend::philox_normal(std::uint64_t seed, std::uint32_t purpose, std::uint64_t step,
                               std::uint64_t first, const Tensor& noise) {
  float* out = f32_out(noise, "philox_normal");
  const std::int64_t n = noise.dim(0), p = noise.numel() / std::max<std::int64_t>(n, 1);
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; ++i) {
    Philox rng(seed, static_cast<RngPurpose>(purpose), step, first + static_cast<std::uint64_t>(i));
    for (std::int64_t j = 0; j < p; ++j) out[i * p + j] = rng.normal();
  }
}

void CpuBackend::q_sample(const Tensor& x0, const Tensor& noise, const Tensor& t,
                          const Tensor& coefs, const Tensor& x_t) {
  const std::int64_t n = x0.dim(0), p = x0.numel() / std::max<std::int64_t>(n, 1);
  DIT_CHECK(noise.numel() == x0.numel() && x_t.numel() == x0.numel(), "q_sample: x0 ",
            x0.shape.str(), ", noise ", noise.shape.str(), " and x_t ", x_t.shape.str(), " differ");
  const LossRows rows = loss_rows(t, coefs, n);
  const float *a = f32(x0, "q_sample x0"), *e = f32(noise, "q_sample noise");
  float* out = f32_out(x_t, "q_sample x_t");
  for (std::int64_t i = 0; i < n; ++i) {
    const float* c = rows.row(i);
    for (std::int64_t j = i * p; j < (i + 1) * p; ++j)
      out[j] = static_cast<float>(static_cast<double>(c[math::kSqrtAlphasCumprod]) * a[j] +
                                  static_cast<double>(c[math::kSqrtOneMinusAlphasCumprod]) * e[j]);
  }
}

namespace {

// Epsilon prediction: one sample's (loss, mse, vb) and gradient (math::loss_element).
void epsilon_loss_row(const float* eps, const float* a, const float* e, const float* c, std::int64_t p,
                      const math::LossKind& kind, double g_scale, float* g, float* tr) {
  const bool learn_sigma = kind.learn_sigma();
  const double w = kind.weighting == math::LossWeighting::Table ? c[math::kLossWeight] : 1.0;
  const double vb_scale = 1.0 / std::numbers::ln2;
  double mse = 0, vb = 0;
  for (std::int64_t j = 0; j < p; ++j) {
    const math::LossElement le = math::loss_element(eps[j], learn_sigma ? eps[p + j] : 0.0, a[j], e[j], c, learn_sigma);
    mse += le.mse;
    vb += le.vb;
    g[j] = static_cast<float>(g_scale * w * le.d_eps);
    if (learn_sigma) g[p + j] = static_cast<float>(g_scale * le.d_v * vb_scale);
  }
  const double m = mse / static_cast<double>(p), v = learn_sigma ? vb / static_cast<double>(p) * vb_scale : 0.0;
  tr[0] = static_cast<float>(w * m + v), tr[1] = static_cast<float>(m), tr[2] = static_cast<float>(v);
}

// Velocity prediction: one sample's (loss, mse, cos) and gradient (math::flow_pixel per pixel).
void velocity_loss_row(const float* v, const float* a, const float* e, std::int64_t channels, std::int64_t hw,
                       const math::LossKind& kind, double grad_scale, std::int64_t n, float* g, float* tr) {
  const double p = static_cast<double>(channels * hw);
  const double mse_scale = grad_scale / (p * static_cast<double>(n));
  const double cos_scale = grad_scale / (static_cast<double>(hw) * static_cast<double>(n));
  double sq = 0, cos = 0;
  for (std::int64_t q = 0; q < hw; ++q) {
    const math::FlowPixel px = math::flow_pixel([v](std::int64_t j) { return static_cast<double>(v[j]); }, a, e, q,
                                                channels, hw, kind.cosine, mse_scale, cos_scale,
                                                [g](std::int64_t j, double d) { g[j] = static_cast<float>(d); });
    sq += px.sq;
    cos += px.one_minus_cos;
  }
  const double m = sq / p, c = kind.cosine == math::LossCosine::Yes ? cos / static_cast<double>(hw) : 0.0;
  tr[0] = static_cast<float>(m + c), tr[1] = static_cast<float>(m), tr[2] = static_cast<float>(c);
}

}  // namespace

void CpuBackend::diffusion_loss(const Tensor& out, const Tensor& x0, const Tensor& noise,
                                const Tensor& t, const Tensor& coefs, const math::LossKind& kind,
                                float grad_scale, const Tensor& dout, const Tensor& terms) {
  const std::int64_t n = x0.dim(0), p = x0.numel() / std::max<std::int64_t>(n, 1);
  const std::int64_t per_out = kind.out_factor() * p;
  const bool velocity = kind.target == math::LossTarget::Velocity;
  DIT_CHECK(out.numel() == n * per_out && dout.numel() == out.numel() && noise.numel() == x0.numel() &&
                terms.numel() == 3 * n && (!velocity || (!kind.learn_sigma() && x0.shape.rank == 4)),
            "diffusion_loss: out ", out.shape.str(), ", x0 ", x0.shape.str(), ", noise ",
            noise.shape.str(), ", dout ", dout.shape.str(), ", terms ", terms.shape.str(),
            " do not fit (learned variance: ", kind.learn_sigma(), ", velocity: ", velocity, ")");
  const LossRows rows = loss_rows(t, coefs, n);
  const float *o = f32(out, "loss out"), *a = f32(x0, "loss x0"), *e = f32(noise, "loss noise");
  float *g = f32_out(dout, "loss dout"), *tr = f32_out(terms, "loss terms");
  const double inv = 1.0 / (static_cast<double>(p) * static_cast<double>(n));
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; ++i) {
    const float* c = rows.row(i);
    if (velocity)
      velocity_loss_row(o + i * p, a + i * p, e + i * p, x0.dim(1), x0.dim(2) * x0.dim(3), kind, grad_scale, n,
                        g + i * p, tr + 3 * i);
    else
      epsilon_loss_row(o + i * per_out, a + i * p, e + i * p, c, p, kind, grad_scale * inv, g + i * per_out,
                       tr + 3 * i);
  }
}

void CpuBackend::distill_output_loss(const Tensor& out, const Tensor& tout, const Tensor& x0, const Tensor& noise,
                                     const Tensor& t, const Tensor& coefs, const math::LossKind& kind,
                                     float grad_scale, const Tensor& dout, const Tensor& terms) {
  const std::int64_t n = x0.dim(0), p = x0.numel() / std::max<std::int64_t>(n, 1);
  const std::int64_t per_out = kind.out_factor() * p, per_t = n > 0 ? tout.numel() / n : 0;
  const bool learn_sigma = kind.learn_sigma();
  DIT_CHECK(out.numel() == n * per_out && dout.numel() == out.numel() && noise.numel() == x0.numel() &&
                (per_t == p || per_t == 2 * p) && tout.numel() == n * per_t && (!learn_sigma || per_t == 2 * p) &&
                terms.numel() == 2 * n,
            "distill_output_loss: out ", out.shape.str(), ", teacher out ", tout.shape.str(), ", x0 ",
            x0.shape.str(), ", dout ", dout.shape.str(), ", terms ", terms.shape.str(),
            " do not fit (learned variance: ", learn_sigma, ")");
  const float *o = f32(out, "kd out"), *to = f32(tout, "kd teacher out"), *a = f32(x0, "kd x0"),
              *e = f32(noise, "kd noise");
  float *g = f32_out(dout, "kd dout"), *tr = f32_out(terms, "kd terms");
  const LossRows rows = learn_sigma ? loss_rows(t, coefs, n) : LossRows{};
  const double g_scale = static_cast<double>(grad_scale) / (static_cast<double>(p) * static_cast<double>(n));
  const double vb_scale = 1.0 / std::numbers::ln2;
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; ++i) {
    const float* c = learn_sigma ? rows.row(i) : nullptr;
    const float *s = o + i * per_out, *te = to + i * per_t;
    float* gi = g + i * per_out;
    double sq = 0, vb = 0;
    for (std::int64_t j = 0; j < p; ++j) {
      const math::KdElement k = math::kd_element(s[j], learn_sigma ? s[p + j] : 0.0, te[j],
                                                 learn_sigma ? te[p + j] : 0.0, a[i * p + j], e[i * p + j], c,
                                                 learn_sigma);
      sq += k.sq;
      vb += k.vb;
      gi[j] = static_cast<float>(gi[j] + g_scale * k.d_s);
      if (learn_sigma) gi[p + j] = static_cast<float>(gi[p + j] + g_scale * k.d_sv * vb_scale);
    }
    tr[2 * i] = static_cast<float>(sq / static_cast<double>(p));
    tr[2 * i + 1] = static_cast<float>(learn_sigma ? vb / static_cast<double>(p) * vb_scale : 0.0);
  }
}

void CpuBackend::feature_distill(const Tensor& fs, const Tensor& ft, double sigma, float grad_scale,
                                 const Tensor& dfs, const Tensor& terms) {
  const std::int64_t n = fs.shape.rank > 0 ? fs.dim(0) : 0, m = n > 0 ? fs.numel() / n : 0;
  DIT_CHECK(ft.shape == fs.shape && dfs.numel() == fs.numel() && terms.numel() == n && m > 1,
            "feature_distill: student ", fs.shape.str(), ", teacher ", ft.shape.str(), ", dfs ", dfs.shape.str(),
            ", terms ", terms.shape.str(), " do not fit");
  const float *s = f32(fs, "feature kd student"), *te = f32(ft, "feature kd teacher");
  float *g = f32_out(dfs, "feature kd dfs"), *tr = f32_out(terms, "feature kd terms");
  const double g_scale = static_cast<double>(grad_scale) / (static_cast<double>(m) * static_cast<double>(n));
  // Whether |x - mean| < sigma * std of the sample's values (two passes in double: torch.var_mean).
  const auto keep = [sigma](const float* x, std::int64_t count) {
    double sum = 0, sq = 0;
    for (std::int64_t j = 0; j < count; ++j) sum += x[j];
    const double mean = sum / static_cast<double>(count);
    for (std::int64_t j = 0; j < count; ++j) sq += (x[j] - mean) * (x[j] - mean);
    const double bound = sigma * std::sqrt(sq / static_cast<double>(count - 1));
    return std::pair<double, double>{mean, bound};
  };
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; ++i) {
    const float *si = s + i * m, *ti = te + i * m;
    const auto [ms, bs] = keep(si, m);
    const auto [mt, bt] = keep(ti, m);
    double loss = 0;
    for (std::int64_t j = 0; j < m; ++j) {
      const double ks = sigma <= 0 || std::abs(si[j] - ms) < bs ? 1.0 : 0.0;
      const double kt = sigma <= 0 || std::abs(ti[j] - mt) < bt ? 1.0 : 0.0;
      const double d = ks * si[j] - kt * ti[j];
      loss += d * d;
      g[i * m + j] = static_cast<float>(g_scale * 2.0 * ks * d);
    }
    tr[i] = static_cast<float>(tr[i] + loss / static_cast<double>(m));
  }
}

void CpuBackend::adamw_ema_step(const Tensor& master, const Tensor& grad, const Tensor& exp_avg,
                                const Tensor& exp_avg_sq, const Tensor& ema, const Tensor& param,
                                const math::AdamWParams& h, float decay) {
  const std::int64_t n = master.numel();
  DIT_CHECK(grad.numel() == n && exp_avg.numel() == n && exp_avg_sq.numel() == n && ema.numel() == n &&
                (!param.data || param.numel() == n),
            "adamw_ema_step: shard sizes differ");
  float* p = f32_out(master, "adamw master");
  const float* g = f32(grad, "adamw grad");
  float *m = f32_out(exp_avg, "adamw exp_avg"), *v = f32_out(exp_avg_sq, "adamw exp_avg_sq");
  float* e = f32_out(ema, "ema");
  float* out = param.data && param.data != master.data ? f32_out(param, "adamw param") : nullptr;
#pragma omp parallel for schedule(static) if (n > 65536)
  for (std::int64_t i = 0; i < n; ++i) {
    math::adamw_update(p[i], g[i], m[i], v[i], h);
    e[i] = math::ema_update(e[i], p[i], decay);
    if (out) out[i] = p[i];
  }
}

double CpuBackend::sum_squares_ranges(const Tensor& x, const Tensor& ranges) {
  count_sync();  // a result on the host
  const float* p = f32(x, "sum_squares_ranges");
  DIT_CHECK(ranges.dtype == DType::I32 && ranges.shape.rank == 2 && ranges.dim(1) == 2,
            "sum_squares_ranges: ranges must be (R, 2) int32, got ", ranges.shape.str());
  const auto* r = static_cast<const std::int32_t*>(ranges.data);
  double s = 0;
  for (std::int64_t k = 0; k < ranges.dim(0); ++k) {
    DIT_CHECK(0 <= r[2 * k] && r[2 * k] <= r[2 * k + 1] && r[2 * k + 1] <= x.numel(),
              "sum_squares_ranges: range [", r[2 * k], ", ", r[2 * k + 1], ") outside ", x.numel());
    double part = 0;
    const std::int64_t b = r[2 * k], e = r[2 * k + 1];
#pragma omp parallel for schedule(static) reduction(+ : part) if (e - b > 65536)
    for (std::int64_t i = b; i < e; ++i) part += static_cast<double>(p[i]) * p[i];
    s += part;
  }
  return s;
}

}  // namespace dit
