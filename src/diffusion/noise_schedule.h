// Float64 noise schedules of the Gaussian diffusion used by DiT: linear betas, every derived array
// of the official GaussianDiffusion, and timestep respacing (respace.py) for fast sampling.
// Host-only and exact in double, so the loss and the samplers match the official numbers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace dit::diffusion {

// The batch layout every function of this module reads: x is (n, c, h, w), row-major.
// The model output has out_channels(c) channels: 2c when the variance is learned.
struct ImageShape {
  std::int64_t n = 0;  // samples in the batch
  std::int64_t c = 0;  // data channels (of x_start, x_t, noise)
  std::int64_t h = 0;
  std::int64_t w = 0;

  std::int64_t per_sample() const { return c * h * w; }  // elements of one sample of x
  std::int64_t numel() const { return n * per_sample(); }
};

// How the model's output variance is chosen (official ModelVarType, the two DiT uses).
//   kFixedLarge:   Sigma_t = beta_t, except Sigma_0 = posterior variance at t = 1.
//   kLearnedRange: log Sigma = frac * log(beta_t) + (1 - frac) * log(posterior var clipped),
//                  frac = (v + 1) / 2 with v the model's second half of channels.
enum class VarianceKind { kFixedLarge, kLearnedRange };

// Every array is (num_timesteps,) in float64, indexed by the (respaced) timestep t.
// alpha_t = 1 - beta_t,  abar_t = prod_{s<=t} alpha_s.
struct Schedule {
  int num_timesteps = 0;
  VarianceKind variance = VarianceKind::kLearnedRange;

  std::vector<double> betas;
  std::vector<double> alphas_cumprod;                 // abar_t
  std::vector<double> alphas_cumprod_prev;            // abar_{t-1}, 1 at t = 0
  std::vector<double> alphas_cumprod_next;            // abar_{t+1}, 0 at the last t
  std::vector<double> sqrt_alphas_cumprod;            // sqrt(abar_t)
  std::vector<double> sqrt_one_minus_alphas_cumprod;  // sqrt(1 - abar_t)
  std::vector<double> log_one_minus_alphas_cumprod;   // log(1 - abar_t)
  std::vector<double> sqrt_recip_alphas_cumprod;      // sqrt(1 / abar_t)
  std::vector<double> sqrt_recipm1_alphas_cumprod;    // sqrt(1 / abar_t - 1)
  // Posterior q(x_{t-1} | x_t, x_0) = N(coef1 * x_0 + coef2 * x_t, posterior_variance):
  //   posterior_variance = beta_t (1 - abar_{t-1}) / (1 - abar_t)   (0 at t = 0)
  //   coef1 = beta_t sqrt(abar_{t-1}) / (1 - abar_t)
  //   coef2 = (1 - abar_{t-1}) sqrt(alpha_t) / (1 - abar_t)
  std::vector<double> posterior_variance;
  std::vector<double> posterior_log_variance_clipped;  // log of posterior_variance, [0] := [1]
  std::vector<double> posterior_mean_coef1;
  std::vector<double> posterior_mean_coef2;

  // timestep_map[t]: the original (unspaced) timestep the model is fed at schedule index t.
  // Identity for an unspaced schedule (DiT does not rescale timesteps).
  std::vector<std::int64_t> timestep_map;

  bool learn_sigma() const { return variance == VarianceKind::kLearnedRange; }
  // Channels of the model output for `data_channels` channels of x.
  std::int64_t out_channels(std::int64_t data_channels) const {
    return learn_sigma() ? 2 * data_channels : data_channels;
  }
  // FIXED_LARGE variance: posterior_variance[1] at t = 0, beta_t after.
  double fixed_large_variance(std::int64_t t) const;
  // x_0 predicted from epsilon: sqrt(1 / abar_t) x_t - sqrt(1 / abar_t - 1) eps.
  double predict_xstart_from_eps(std::size_t t, double x_t, double eps) const {
    return sqrt_recip_alphas_cumprod[t] * x_t - sqrt_recipm1_alphas_cumprod[t] * eps;
  }
  // Mean of the posterior q(x_{t-1} | x_t, x_0): coef1_t x_0 + coef2_t x_t.
  double posterior_mean(std::size_t t, double x_start, double x_t) const {
    return posterior_mean_coef1[t] * x_start + posterior_mean_coef2[t] * x_t;
  }
  // LEARNED_RANGE log variance for the model's raw value v (v in [-1, 1] spans the range):
  //   frac = (v + 1) / 2,  frac * log(beta_t) + (1 - frac) * posterior_log_variance_clipped[t].
  // d/dv = (log(beta_t) - posterior_log_variance_clipped[t]) / 2.
  static double learned_range_log_variance(double v, double max_log, double min_log) {
    const double frac = (v + 1.0) / 2.0;
    return frac * max_log + (1.0 - frac) * min_log;
  }
  // Throws unless 0 <= t < num_timesteps; `what` names the caller's argument.
  void check_timestep(std::int64_t t, const char* what) const;
  // The timesteps to feed the model for a batch of schedule indices: timestep_map[t[i]].
  std::vector<std::int64_t> model_timesteps(std::span<const std::int64_t> t) const;
};

// The longest schedule accepted (diffusion.steps): 100x the official 1000, and its arrays (about
// 20 float64 values per step) stay a few MB, so a mistyped 1e9 is refused rather than allocated.
inline constexpr int kMaxDiffusionSteps = 100000;

// Ho et al.'s linear betas stretched to any length: scale = 1000 / T,
// beta_i = linspace(1e-4 * scale, 0.02 * scale, T)[i] (numpy's float64 linspace).
std::vector<double> linear_betas(int num_timesteps);

// Builds every derived array from betas (each in (0, 1], at least 2 of them).
// An empty timestep_map means the identity.
Schedule make_schedule(std::vector<double> betas, VarianceKind variance,
                       std::vector<std::int64_t> timestep_map = {});

// The original timesteps kept by a respacing string, ascending and unique (official
// space_timesteps): "ddimN" takes the integer stride giving exactly N steps from 0;
// "a,b,c" splits T into equal sections (the first T % k one step longer) and takes a, b, c
// evenly spaced steps from each (rounding half to even, as Python's round).
std::vector<int> space_timesteps(int num_timesteps, const std::string& section_counts);

// The schedule over the kept timesteps of `base`: beta'_j = 1 - abar_{k_j} / abar_{k_{j-1}}
// (abar before the first kept step is 1), timestep_map = the kept original timesteps.
Schedule respace(const Schedule& base, const std::vector<int>& use_timesteps);

// What the official create_diffusion(timestep_respacing, learn_sigma, diffusion_steps) takes;
// noise schedule "linear", epsilon prediction, MSE loss (not rescaled).
struct DiffusionOptions {
  std::string respacing;  // "" keeps all steps; "250", "ddim50", "10,15,20"
  bool learn_sigma = true;
  int diffusion_steps = 1000;
};

Schedule create_diffusion(const DiffusionOptions& options);

}  // namespace dit::diffusion
