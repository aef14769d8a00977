// The DiT training loss in float64 with its exact gradient w.r.t. the model output: epsilon MSE
// plus, when the variance is learned, the variational bound term (official training_losses with
// LossType.MSE). The model runs elsewhere; this module sees its output and returns d loss / d out.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "diffusion/noise_schedule.h"
#include "diffusion/objective.h"

namespace dit::diffusion {

// KL(N(mean1, e^logvar1) || N(mean2, e^logvar2)) in nats:
//   0.5 * (-1 + logvar2 - logvar1 + e^(logvar1 - logvar2) + (mean1 - mean2)^2 e^(-logvar2)).
double normal_kl(double mean1, double logvar1, double mean2, double logvar2);

// Phi(x) ~= 0.5 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))), the official fast approximation.
double approx_standard_normal_cdf(double x);

// log P(x) of a Gaussian N(mean, e^(2 log_scale)) discretized to 256 bins of width 2/255 on
// [-1, 1]: log(Phi(plus) - Phi(minus)), plus/minus = (x - mean +- 1/255) e^(-log_scale); the edge
// bins take the open tails: log Phi(plus) when x < -0.999, log(1 - Phi(minus)) when x > 0.999.
// Each probability is clamped to >= 1e-12 before the log.
double discretized_gaussian_log_likelihood(double x, double mean, double log_scale);

// d/d log_scale of discretized_gaussian_log_likelihood (0 where the 1e-12 clamp is active).
double discretized_gaussian_log_likelihood_dlogscale(double x, double mean, double log_scale);

// d/d logvar2 of normal_kl: 0.5 * (1 - e^(logvar1 - logvar2) - (mean1 - mean2)^2 e^(-logvar2)).
double normal_kl_dlogvar2(double mean1, double logvar1, double mean2, double logvar2);

// x_t = sqrt(abar_t) x_0 + sqrt(1 - abar_t) noise, per sample (x_start and noise: (n, ...)).
std::vector<double> q_sample(const Schedule& schedule, std::span<const double> x_start,
                             std::span<const std::int64_t> t, std::span<const double> noise);

// Inputs of one training-loss evaluation. Shapes follow `shape` (the data, n x c x h x w):
struct LossInputs {
  std::span<const double> model_output;  // (n, out_channels(c), h, w): [eps | v] if learn_sigma
  std::span<const double> x_start;       // (n, c, h, w), data in [-1, 1]
  std::span<const double> noise;         // (n, c, h, w), the injected epsilon
  std::span<const std::int64_t> t;       // (n,), indices into the schedule
};

// Per-sample terms, as the official dict, and the gradient of mean_n(loss[n]).
struct LossTerms {
  std::vector<double> loss;  // (n,) mse + vb
  std::vector<double> mse;   // (n,) mean over (c, h, w) of (noise - eps)^2
  std::vector<double> vb;    // (n,) in bits per dim; empty unless learn_sigma
  // (n, out_channels(c), h, w): d mean_n(loss) / d model_output. The VB term sees the model mean
  // through a detached eps, so its gradient reaches only the variance channels [c, 2c).
  std::vector<double> grad_model_output;
};

// The official training_losses (LossType.MSE, epsilon prediction): x_t = q_sample(x_0, t, noise);
// mse = mean (noise - eps)^2; with a learned range variance, vb = (t == 0 ? decoder NLL : KL of the
// true posterior to p(x_{t-1} | x_t)) averaged over dims / log 2, with the mean from detached eps.
LossTerms training_losses(const Schedule& schedule, const ImageShape& shape, const LossInputs& in);

// The schedule as the backends' loss kernels read it: (num_timesteps, math::kNumLossCoefs) fp32,
// row t holding math.h's LossCoef values at schedule index t (kLossWeight: min_snr_weight or 1).
std::vector<float> loss_coef_table(const Schedule& schedule, const LossWeighting& weighting = {});

// The rows of the flow path for a microbatch, one per sample (its t): (n, math::kNumLossCoefs)
// fp32 with kSqrtAlphasCumprod = t and kSqrtOneMinusAlphasCumprod = 1 - t (the coefficients of
// data and noise in x_t), so Backend::q_sample forms x_t = t x1 + (1 - t) x0 at index i; weight 1.
std::vector<float> flow_coef_rows(std::span<const double> t);

}  // namespace dit::diffusion
