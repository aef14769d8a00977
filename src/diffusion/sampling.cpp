// Reverse-diffusion steps (DDPM and DDIM) and the classifier-free-guidance combine, float64,
// written to follow the official gaussian_diffusion.py and models.py operation by operation.
#include "diffusion/sampling.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace dit::diffusion {

namespace {

void check_shape(const char* fn, const ImageShape& s) {
  DIT_CHECK(s.n > 0 && s.c > 0 && s.h > 0 && s.w > 0, fn,
            ": shape (n, c, h, w) must be positive, got (", s.n, ", ", s.c, ", ", s.h, ", ", s.w,
            ")");
}

void check_size(const char* fn, const char* what, std::size_t got, std::int64_t expected) {
  DIT_CHECK(static_cast<std::int64_t>(got) == expected, fn, ": ", what, " has ", got,
            " elements, expected ", expected);
}

// The checks every step shares: output and x sizes, one valid t per sample.
void check_step_inputs(const char* fn, const Schedule& sc, const ImageShape& shape,
                       std::span<const double> model_output, std::span<const double> x,
                       std::span<const std::int64_t> t) {
  check_shape(fn, shape);
  check_size(fn, "model_output", model_output.size(),
             shape.n * sc.out_channels(shape.c) * shape.h * shape.w);
  check_size(fn, "x", x.size(), shape.numel());
  check_size(fn, "t", t.size(), shape.n);
  for (std::int64_t ti : t) sc.check_timestep(ti, fn);
}

}  // namespace

MeanVariance p_mean_variance(const Schedule& sc, const ImageShape& shape,
                             std::span<const double> model_output, std::span<const double> x,
                             std::span<const std::int64_t> t, ClipDenoised clip) {
  check_step_inputs("p_mean_variance", sc, shape, model_output, x, t);
  const std::int64_t p = shape.per_sample();
  const std::int64_t c_out_p = sc.out_channels(shape.c) * shape.h * shape.w;
  MeanVariance out;
  out.pred_xstart.resize(x.size());
  out.mean.resize(x.size());
  out.variance.resize(x.size());
  out.log_variance.resize(x.size());
  for (std::int64_t i = 0; i < shape.n; ++i) {
    const auto ti = static_cast<std::size_t>(t[i]);
    const double* eps = model_output.data() + i * c_out_p;
    const double* v = eps + p;  // the variance channels, read only when learned
    const double max_log = std::log(sc.betas[ti]);
    const double min_log = sc.posterior_log_variance_clipped[ti];
    const double fixed_var = sc.fixed_large_variance(t[i]);
    const double fixed_log = std::log(fixed_var);
    for (std::int64_t j = 0; j < p; ++j) {
      const std::size_t k = static_cast<std::size_t>(i * p + j);
      if (sc.learn_sigma()) {
        out.log_variance[k] = Schedule::learned_range_log_variance(v[j], max_log, min_log);
        out.variance[k] = std::exp(out.log_variance[k]);
      } else {
        out.log_variance[k] = fixed_log;
        out.variance[k] = fixed_var;
      }
      double x0 = sc.predict_xstart_from_eps(ti, x[k], eps[j]);
      if (clip == ClipDenoised::kYes) x0 = std::clamp(x0, -1.0, 1.0);
      out.pred_xstart[k] = x0;
      out.mean[k] = sc.posterior_mean(ti, x0, x[k]);
    }
  }
  return out;
}

StepResult p_sample(const Schedule& sc, const ImageShape& shape,
                    std::span<const double> model_output, std::span<const double> x,
                    std::span<const std::int64_t> t, std::span<const double> noise,
                    ClipDenoised clip) {
  MeanVariance mv = p_mean_variance(sc, shape, model_output, x, t, clip);
  check_size("p_sample", "noise", noise.size(), shape.numel());
  const std::int64_t p = shape.per_sample();
  StepResult out{std::move(mv.mean), std::move(mv.pred_xstart)};
  for (std::int64_t i = 0; i < shape.n; ++i) {
    if (t[i] == 0) continue;  // the last step returns the mean
    for (std::int64_t k = i * p; k < (i + 1) * p; ++k)
      out.sample[k] += std::exp(0.5 * mv.log_variance[k]) * noise[k];
  }
  return out;
}

StepResult ddim_sample(const Schedule& sc, const ImageShape& shape,
                       std::span<const double> model_output, std::span<const double> x,
                       std::span<const std::int64_t> t, std::span<const double> noise, double eta,
                       ClipDenoised clip) {
  MeanVariance mv = p_mean_variance(sc, shape, model_output, x, t, clip);
  DIT_CHECK(eta >= 0.0, "ddim_sample: eta must be >= 0, got ", eta);
  if (!(noise.empty() && eta == 0.0))
    check_size("ddim_sample", "noise", noise.size(), shape.numel());
  const std::int64_t p = shape.per_sample();
  StepResult out;
  out.sample.resize(x.size());
  for (std::int64_t i = 0; i < shape.n; ++i) {
    const auto ti = static_cast<std::size_t>(t[i]);
    const double ab = sc.alphas_cumprod[ti], ab_prev = sc.alphas_cumprod_prev[ti];
    const double sigma =
        eta * std::sqrt((1.0 - ab_prev) / (1.0 - ab)) * std::sqrt(1.0 - ab / ab_prev);
    const double eps_coef = std::sqrt(1.0 - ab_prev - sigma * sigma);
    for (std::int64_t k = i * p; k < (i + 1) * p; ++k) {
      const double x0 = mv.pred_xstart[k];
      // eps = (sqrt(1/abar) x_t - x_0) / sqrt(1/abar - 1), consistent with a clipped x_0.
      const double eps =
          (sc.sqrt_recip_alphas_cumprod[ti] * x[k] - x0) / sc.sqrt_recipm1_alphas_cumprod[ti];
      double s = x0 * std::sqrt(ab_prev) + eps_coef * eps;
      if (t[i] != 0 && !noise.empty()) s += sigma * noise[k];
      out.sample[k] = s;
    }
  }
  out.pred_xstart = std::move(mv.pred_xstart);
  return out;
}

std::vector<double> cfg_combine(const ImageShape& out_shape, std::span<const double> model_output,
                                double scale, std::int64_t guided_channels) {
  check_shape("cfg_combine", out_shape);
  DIT_CHECK(out_shape.n % 2 == 0, "cfg_combine: the batch of ", out_shape.n,
            " must be even (conditional half, then null-label half)");
  DIT_CHECK(guided_channels >= 1 && guided_channels <= out_shape.c, "cfg_combine: guided_channels ",
            guided_channels, " must be in [1, ", out_shape.c, "] (the model output channels)");
  check_size("cfg_combine", "model_output", model_output.size(), out_shape.numel());
  std::vector<double> out(model_output.begin(), model_output.end());
  const std::int64_t half = out_shape.n / 2;
  const std::int64_t hw = out_shape.h * out_shape.w, row = out_shape.per_sample();
  const std::int64_t guided = guided_channels * hw;  // channels come first in a row
  for (std::int64_t i = 0; i < half; ++i) {
    const double* cond = model_output.data() + i * row;
    const double* uncond = model_output.data() + (i + half) * row;
    for (std::int64_t j = 0; j < guided; ++j) {
      const double g = uncond[j] + scale * (cond[j] - uncond[j]);
      out[i * row + j] = g;
      out[(i + half) * row + j] = g;
    }
  }
  return out;
}

}  // namespace dit::diffusion
