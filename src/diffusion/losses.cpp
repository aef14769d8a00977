// Training loss of the official DiT diffusion (MSE + variational bound) in float64, with the
// analytic backward through the learned-range variance, the Gaussian KL and the discretized
// decoder likelihood, so the trainer needs no autograd for this last step.
#include "diffusion/losses.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "backend/math.h"
#include "core/error.h"

namespace dit::diffusion {

namespace {

constexpr double kBinHalfWidth = 1.0 / 255.0;  // half of a bin of 256 levels on [-1, 1]
constexpr double kProbFloor = 1e-12;           // clamp(min=1e-12) before every log
const double kSqrt2OverPi = std::sqrt(2.0 / std::numbers::pi);

// d Phi_approx / dx = 0.5 (1 - tanh(u)^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2),
// u = sqrt(2/pi) (x + 0.044715 x^3).
double approx_standard_normal_pdf(double x) {
  const double th = std::tanh(kSqrt2OverPi * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 - th * th) * kSqrt2OverPi * (1.0 + 3.0 * 0.044715 * x * x);
}

void check_batch(const char* what, std::span<const double> a, std::int64_t expected) {
  DIT_CHECK(static_cast<std::int64_t>(a.size()) == expected, what, " has ", a.size(),
            " elements, expected ", expected);
}

}  // namespace

double normal_kl(double mean1, double logvar1, double mean2, double logvar2) {
  const double d = mean1 - mean2;
  return 0.5 *
         (-1.0 + logvar2 - logvar1 + std::exp(logvar1 - logvar2) + d * d * std::exp(-logvar2));
}

double normal_kl_dlogvar2(double mean1, double logvar1, double mean2, double logvar2) {
  const double d = mean1 - mean2;
  return 0.5 * (1.0 - std::exp(logvar1 - logvar2) - d * d * std::exp(-logvar2));
}

double approx_standard_normal_cdf(double x) {
  return 0.5 * (1.0 + std::tanh(kSqrt2OverPi * (x + 0.044715 * std::pow(x, 3))));
}

double discretized_gaussian_log_likelihood(double x, double mean, double log_scale) {
  const double centered = x - mean;
  const double inv_stdv = std::exp(-log_scale);
  const double cdf_plus = approx_standard_normal_cdf(inv_stdv * (centered + kBinHalfWidth));
  const double cdf_min = approx_standard_normal_cdf(inv_stdv * (centered - kBinHalfWidth));
  if (x < -0.999) return std::log(std::max(cdf_plus, kProbFloor));
  if (x > 0.999) return std::log(std::max(1.0 - cdf_min, kProbFloor));
  return std::log(std::max(cdf_plus - cdf_min, kProbFloor));
}

// With s = log_scale, plus = e^-s (x - mean + 1/255) so d plus / ds = -plus (minus alike):
//   d log Phi(plus) / ds        = -phi(plus) plus / Phi(plus)
//   d log(1 - Phi(minus)) / ds  =  phi(minus) minus / (1 - Phi(minus))
//   d log(Phi(plus) - Phi(minus)) / ds
//                               = (phi(minus) minus - phi(plus) plus) / (Phi(plus) - Phi(minus))
// where the clamp to 1e-12 is active the value is constant and the derivative 0 (PyTorch passes
// the gradient where the input equals the bound; so do we).
double discretized_gaussian_log_likelihood_dlogscale(double x, double mean, double log_scale) {
  const double centered = x - mean;
  const double inv_stdv = std::exp(-log_scale);
  const double plus_in = inv_stdv * (centered + kBinHalfWidth);
  const double min_in = inv_stdv * (centered - kBinHalfWidth);
  const double cdf_plus = approx_standard_normal_cdf(plus_in);
  const double cdf_min = approx_standard_normal_cdf(min_in);
  if (x < -0.999) {
    if (cdf_plus < kProbFloor) return 0.0;
    return -approx_standard_normal_pdf(plus_in) * plus_in / cdf_plus;
  }
  if (x > 0.999) {
    if (1.0 - cdf_min < kProbFloor) return 0.0;
    return approx_standard_normal_pdf(min_in) * min_in / (1.0 - cdf_min);
  }
  const double delta = cdf_plus - cdf_min;
  if (delta < kProbFloor) return 0.0;
  return (approx_standard_normal_pdf(min_in) * min_in -
          approx_standard_normal_pdf(plus_in) * plus_in) /
         delta;
}

std::vector<double> q_sample(const Schedule& schedule, std::span<const double> x_start,
                             std::span<const std::int64_t> t, std::span<const double> noise) {
  const std::int64_t n = static_cast<std::int64_t>(t.size());
  DIT_CHECK(n > 0 && x_start.size() % t.size() == 0, "q_sample: x_start has ", x_start.size(),
            " elements, expected a positive multiple of the ", n, " timesteps");
  check_batch("q_sample noise", noise, static_cast<std::int64_t>(x_start.size()));
  const std::size_t per = x_start.size() / t.size();
  std::vector<double> x_t(x_start.size());
  for (std::int64_t i = 0; i < n; ++i) {
    schedule.check_timestep(t[i], "q_sample t");
    const auto ti = static_cast<std::size_t>(t[i]);
    const double a = schedule.sqrt_alphas_cumprod[ti],
                 b = schedule.sqrt_one_minus_alphas_cumprod[ti];
    for (std::size_t j = i * per; j < (i + 1) * per; ++j) x_t[j] = a * x_start[j] + b * noise[j];
  }
  return x_t;
}

namespace {

// One sample's slices of the inputs and of the gradient (p = c * h * w elements per slice).
struct SampleSlices {
  const double* eps;    // model_output[i, 0:c]
  const double* v;      // model_output[i, c:2c], null without learn_sigma
  const double* x0;     // x_start[i]
  const double* noise;  // noise[i]
  double* g_eps;        // grad[i, 0:c]
  double* g_v;          // grad[i, c:2c], null without learn_sigma
};

// mse = mean_j (noise_j - eps_j)^2;  d mean_n(loss) / d eps_j = -2 (noise_j - eps_j) / (p n).
double mse_term(const SampleSlices& s, std::int64_t p, double inv_n) {
  double sum = 0.0;
  for (std::int64_t j = 0; j < p; ++j) {
    const double d = s.noise[j] - s.eps[j];
    sum += d * d;
    s.g_eps[j] = -2.0 * d / static_cast<double>(p) * inv_n;
  }
  return sum / static_cast<double>(p);
}

// vb in bits per dim for one sample at schedule index t, the model mean built from the (detached)
// eps. With lv = learned log variance, d vb / d v_j = d term_j / d lv * (max_log - min_log) / 2
// / (p log 2); the decoder NLL's log scale is lv / 2.
double vb_term(const Schedule& sc, std::size_t t, const SampleSlices& s, std::int64_t p,
               double inv_n) {
  const double max_log = std::log(sc.betas[t]);
  const double min_log = sc.posterior_log_variance_clipped[t];
  const double true_logvar = sc.posterior_log_variance_clipped[t];
  const double scale = 1.0 / (static_cast<double>(p) * std::numbers::ln2);
  const double dlv_dv = (max_log - min_log) / 2.0;
  const double a = sc.sqrt_alphas_cumprod[t], b = sc.sqrt_one_minus_alphas_cumprod[t];
  double sum = 0.0;
  for (std::int64_t j = 0; j < p; ++j) {
    const double x_t = a * s.x0[j] + b * s.noise[j];
    const double model_mean =
        sc.posterior_mean(t, sc.predict_xstart_from_eps(t, x_t, s.eps[j]), x_t);
    const double lv = Schedule::learned_range_log_variance(s.v[j], max_log, min_log);
    double term, dterm_dlv;
    if (t == 0) {  // decoder NLL: -log p(x_0 | x_1)
      term = -discretized_gaussian_log_likelihood(s.x0[j], model_mean, 0.5 * lv);
      dterm_dlv =
          -0.5 * discretized_gaussian_log_likelihood_dlogscale(s.x0[j], model_mean, 0.5 * lv);
    } else {  // KL(q(x_{t-1} | x_t, x_0) || p(x_{t-1} | x_t))
      const double true_mean = sc.posterior_mean(t, s.x0[j], x_t);
      term = normal_kl(true_mean, true_logvar, model_mean, lv);
      dterm_dlv = normal_kl_dlogvar2(true_mean, true_logvar, model_mean, lv);
    }
    sum += term;
    s.g_v[j] = dterm_dlv * dlv_dv * scale * inv_n;
  }
  return sum / static_cast<double>(p) / std::numbers::ln2;
}

}  // namespace

LossTerms training_losses(const Schedule& schedule, const ImageShape& shape, const LossInputs& in) {
  DIT_CHECK(shape.n > 0 && shape.c > 0 && shape.h > 0 && shape.w > 0,
            "training_losses: shape (n, c, h, w) must be positive, got (", shape.n, ", ", shape.c,
            ", ", shape.h, ", ", shape.w, ")");
  const std::int64_t c_out = schedule.out_channels(shape.c);
  const std::int64_t p = shape.per_sample(), hw = shape.h * shape.w;
  check_batch("training_losses model_output", in.model_output, shape.n * c_out * hw);
  check_batch("training_losses x_start", in.x_start, shape.numel());
  check_batch("training_losses noise", in.noise, shape.numel());
  DIT_CHECK(static_cast<std::int64_t>(in.t.size()) == shape.n, "training_losses t has ",
            in.t.size(), " entries, expected one per sample (", shape.n, ")");

  const bool learn_sigma = schedule.learn_sigma();
  const double inv_n = 1.0 / static_cast<double>(shape.n);
  LossTerms out;
  out.loss.resize(static_cast<std::size_t>(shape.n));
  out.mse.resize(static_cast<std::size_t>(shape.n));
  if (learn_sigma) out.vb.resize(static_cast<std::size_t>(shape.n));
  out.grad_model_output.assign(in.model_output.size(), 0.0);
  for (std::int64_t i = 0; i < shape.n; ++i) {
    schedule.check_timestep(in.t[i], "training_losses t");
    const std::int64_t o = i * c_out * hw;
    const SampleSlices s{in.model_output.data() + o,
                         learn_sigma ? in.model_output.data() + o + p : nullptr,
                         in.x_start.data() + i * p,
                         in.noise.data() + i * p,
                         out.grad_model_output.data() + o,
                         learn_sigma ? out.grad_model_output.data() + o + p : nullptr};
    const auto k = static_cast<std::size_t>(i);
    out.mse[k] = mse_term(s, p, inv_n);
    out.loss[k] = out.mse[k];
    if (learn_sigma) {
      out.vb[k] = vb_term(schedule, static_cast<std::size_t>(in.t[i]), s, p, inv_n);
      out.loss[k] = out.mse[k] + out.vb[k];
    }
  }
  return out;
}

std::vector<float> loss_coef_table(const Schedule& sc, const LossWeighting& weighting) {
  const std::size_t k = math::kNumLossCoefs;
  std::vector<float> table(static_cast<std::size_t>(sc.num_timesteps) * k);
  for (std::size_t t = 0; t < static_cast<std::size_t>(sc.num_timesteps); ++t) {
    float* row = table.data() + t * k;
    row[math::kSqrtAlphasCumprod] = static_cast<float>(sc.sqrt_alphas_cumprod[t]);
    row[math::kSqrtOneMinusAlphasCumprod] = static_cast<float>(sc.sqrt_one_minus_alphas_cumprod[t]);
    row[math::kSqrtRecipAlphasCumprod] = static_cast<float>(sc.sqrt_recip_alphas_cumprod[t]);
    row[math::kSqrtRecipm1AlphasCumprod] = static_cast<float>(sc.sqrt_recipm1_alphas_cumprod[t]);
    row[math::kPosteriorMeanCoef1] = static_cast<float>(sc.posterior_mean_coef1[t]);
    row[math::kPosteriorMeanCoef2] = static_cast<float>(sc.posterior_mean_coef2[t]);
    row[math::kLogBeta] = static_cast<float>(std::log(sc.betas[t]));
    row[math::kPosteriorLogVarClipped] = static_cast<float>(sc.posterior_log_variance_clipped[t]);
    row[math::kIsFirstStep] = t == 0 ? 1.f : 0.f;
    row[math::kLossWeight] =
        weighting.weight == LossWeight::MinSnr
            ? static_cast<float>(min_snr_weight(sc, static_cast<std::int64_t>(t), weighting.min_snr_gamma))
            : 1.f;
  }
  return table;
}

std::vector<float> flow_coef_rows(std::span<const double> t) {
  const std::size_t k = math::kNumLossCoefs;
  std::vector<float> rows(t.size() * k, 0.f);
  for (std::size_t i = 0; i < t.size(); ++i) {
    rows[i * k + math::kSqrtAlphasCumprod] = static_cast<float>(t[i]);
    rows[i * k + math::kSqrtOneMinusAlphasCumprod] = static_cast<float>(1.0 - t[i]);
    rows[i * k + math::kLossWeight] = 1.f;
  }
  return rows;
}

}  // namespace dit::diffusion
