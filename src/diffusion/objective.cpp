// Float64 references of the flow objective, the timestep maps, Min-SNR weights and the flow
// samplers (see objective.h), written to follow SiT's and LightningDiT's transport/ step by step.
#include "diffusion/objective.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace dit::diffusion {

namespace {

constexpr double kCosEps = 1e-8;  // torch cosine_similarity's default eps

void check_same(const char* fn, std::size_t a, std::size_t b) {
  DIT_CHECK(a == b, fn, ": arrays of ", a, " and ", b, " elements differ");
}

}  // namespace

const char* samplers_of(Objective o) {
  return o == Objective::Ddpm ? "ddim or ddpm" : "euler, heun or euler_maruyama";
}

math::LossKind loss_kind(const TrainObjective& o, bool learn_sigma) {
  math::LossKind k;
  if (o.objective == Objective::Flow) {
    k.target = math::LossTarget::Velocity;
    k.cosine = o.cosine == CosineTerm::Yes ? math::LossCosine::Yes : math::LossCosine::No;
    return k;
  }
  k.variance = learn_sigma ? math::LossVariance::Learned : math::LossVariance::Fixed;
  k.weighting = o.weighting.weight == LossWeight::MinSnr ? math::LossWeighting::Table : math::LossWeighting::None;
  return k;
}

DrawnTime draw_time(Philox& rng, const TrainObjective& o, int num_timesteps) {
  DrawnTime d;
  if (o.objective == Objective::Ddpm) {
    DIT_CHECK(o.timesteps.sampling == TimestepSampling::Uniform,
              "logit-normal timesteps are for the flow objective, not DDPM's discrete timesteps");
    d.index = rng.below(static_cast<std::uint32_t>(num_timesteps));
  } else if (o.timesteps.sampling == TimestepSampling::Uniform) {
    d.t = rng.uniform_f64();
  } else {
    d.t = logit_normal_t(rng.normal(), o.timesteps.mean, o.timesteps.std);
  }
  return d;
}

double logit_normal_t(double u, double mean, double std) {
  return 1.0 / (1.0 + std::exp(-(mean + std * u)));
}

double min_snr_weight(const Schedule& sc, std::int64_t t, double gamma) {
  sc.check_timestep(t, "min_snr_weight t");
  const auto i = static_cast<std::size_t>(t);
  const double r = sc.sqrt_alphas_cumprod[i] / sc.sqrt_one_minus_alphas_cumprod[i];
  const double snr = r * r;
  if (snr == 0.0) return 1.0;
  return std::min(snr, gamma) / snr;
}

std::vector<double> flow_xt(const ImageShape& shape, std::span<const double> x1, std::span<const double> x0,
                            std::span<const double> t) {
  check_same("flow_xt", x1.size(), static_cast<std::size_t>(shape.numel()));
  check_same("flow_xt", x0.size(), x1.size());
  check_same("flow_xt t", t.size(), static_cast<std::size_t>(shape.n));
  const std::int64_t p = shape.per_sample();
  std::vector<double> xt(x1.size());
  for (std::int64_t i = 0; i < shape.n; ++i)
    for (std::int64_t j = i * p; j < (i + 1) * p; ++j) xt[j] = t[i] * x1[j] + (1.0 - t[i]) * x0[j];
  return xt;
}

FlowLossTerms flow_training_losses(const ImageShape& shape, const FlowLossInputs& in, CosineTerm cosine) {
  DIT_CHECK(shape.n > 0 && shape.c > 0 && shape.h > 0 && shape.w > 0,
            "flow_training_losses: shape (n, c, h, w) must be positive");
  const std::size_t numel = static_cast<std::size_t>(shape.numel());
  check_same("flow_training_losses model_output", in.model_output.size(), numel);
  check_same("flow_training_losses x1", in.x1.size(), numel);
  check_same("flow_training_losses x0", in.x0.size(), numel);
  const std::int64_t p = shape.per_sample(), hw = shape.h * shape.w;
  const double inv_n = 1.0 / static_cast<double>(shape.n);
  FlowLossTerms out;
  out.loss.assign(static_cast<std::size_t>(shape.n), 0.0);
  out.mse.assign(static_cast<std::size_t>(shape.n), 0.0);
  if (cosine == CosineTerm::Yes) out.cos.assign(static_cast<std::size_t>(shape.n), 0.0);
  out.grad_model_output.assign(numel, 0.0);
  for (std::int64_t i = 0; i < shape.n; ++i) {
    const double* v = in.model_output.data() + i * p;
    const double* a = in.x1.data() + i * p;
    const double* b = in.x0.data() + i * p;
    double* g = out.grad_model_output.data() + i * p;
    double mse = 0.0;
    for (std::int64_t j = 0; j < p; ++j) {
      const double d = v[j] - (a[j] - b[j]);
      mse += d * d;
      g[j] = 2.0 * d / static_cast<double>(p) * inv_n;
    }
    out.mse[i] = mse / static_cast<double>(p);
    out.loss[i] = out.mse[i];
    if (cosine == CosineTerm::No) continue;
    double cos_sum = 0.0;
    for (std::int64_t q = 0; q < hw; ++q) {  // one pixel: the channels at stride hw
      double vu = 0.0, vv = 0.0, uu = 0.0;
      for (std::int64_t c = 0; c < shape.c; ++c) {
        const std::int64_t j = c * hw + q;
        const double u = a[j] - b[j];
        vu += v[j] * u, vv += v[j] * v[j], uu += u * u;
      }
      const double nv = std::max(std::sqrt(vv), kCosEps), nu = std::max(std::sqrt(uu), kCosEps);
      const double cs = vu / (nv * nu);
      cos_sum += 1.0 - cs;
      for (std::int64_t c = 0; c < shape.c; ++c) {
        const std::int64_t j = c * hw + q;
        const double u = a[j] - b[j];
        g[j] += -(u / (nv * nu) - cs * v[j] / (nv * nv)) / static_cast<double>(hw) * inv_n;
      }
    }
    out.cos[i] = cos_sum / static_cast<double>(hw);
    out.loss[i] += out.cos[i];
  }
  return out;
}

std::vector<double> flow_time_grid(int num_steps, double t0, double t1) {
  DIT_CHECK(num_steps >= 2, "flow_time_grid: num_steps ", num_steps, " must be >= 2");
  std::vector<double> t(static_cast<std::size_t>(num_steps));
  const double step = (t1 - t0) / (num_steps - 1);
  for (int i = 0; i < num_steps; ++i) t[i] = i + 1 == num_steps ? t1 : t0 + step * i;
  return t;
}

std::vector<double> euler_step(std::span<const double> x, std::span<const double> v, double dt) {
  check_same("euler_step", x.size(), v.size());
  std::vector<double> out(x.size());
  for (std::size_t k = 0; k < x.size(); ++k) out[k] = x[k] + dt * v[k];
  return out;
}

std::vector<double> heun_predict(std::span<const double> x, std::span<const double> k1, double dt) {
  return euler_step(x, k1, dt);
}

std::vector<double> heun_correct(std::span<const double> x, std::span<const double> k1,
                                 std::span<const double> k2, double dt) {
  check_same("heun_correct", x.size(), k1.size());
  check_same("heun_correct", x.size(), k2.size());
  std::vector<double> out(x.size());
  for (std::size_t k = 0; k < x.size(); ++k) out[k] = x[k] + dt / 2.0 * (k1[k] + k2[k]);
  return out;
}

std::vector<double> flow_sde_drift(std::span<const double> x, std::span<const double> v, double t) {
  check_same("flow_sde_drift", x.size(), v.size());
  // ICPlan: alpha_t = t (d 1), sigma_t = 1 - t (d -1); reverse_alpha_ratio = alpha / d_alpha = t,
  // var = sigma^2 - t d_sigma sigma; diffusion "sigma" = 1 - t.
  const double sigma = 1.0 - t, var = sigma * sigma - t * -1.0 * sigma, w = sigma;
  std::vector<double> out(x.size());
  for (std::size_t k = 0; k < x.size(); ++k) {
    const double score = (t * v[k] - x[k]) / var;
    out[k] = v[k] + w * score;
  }
  return out;
}

std::vector<double> euler_maruyama_step(std::span<const double> x, std::span<const double> v, double t,
                                        double dt, std::span<const double> noise) {
  check_same("euler_maruyama_step noise", x.size(), noise.size());
  const std::vector<double> drift = flow_sde_drift(x, v, t);
  const double w = 1.0 - t;
  std::vector<double> out(x.size());
  for (std::size_t k = 0; k < x.size(); ++k)
    out[k] = (x[k] + drift[k] * dt) + std::sqrt(2.0 * w) * (noise[k] * std::sqrt(dt));
  return out;
}

std::vector<double> sde_mean_last_step(std::span<const double> x, std::span<const double> v, double t,
                                       double last_step_size) {
  const std::vector<double> drift = flow_sde_drift(x, v, t);
  std::vector<double> out(x.size());
  for (std::size_t k = 0; k < x.size(); ++k) out[k] = x[k] + drift[k] * last_step_size;
  return out;
}

}  // namespace dit::diffusion
