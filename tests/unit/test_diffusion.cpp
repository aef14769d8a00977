// Tests of the float64 diffusion module: schedule identities derived by hand, respacing as the
// official respace.py, the loss gradient against central finite differences, and sampling steps
// against closed forms (a perfect epsilon recovers x_0; DDIM at eta = 1 has the posterior var).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numbers>
#include <random>
#include <vector>

#include "core/error.h"
#include "diffusion/losses.h"
#include "diffusion/sampling.h"
#include "diffusion/noise_schedule.h"

namespace dd = dit::diffusion;

namespace {

std::vector<double> randn(std::size_t n, std::uint64_t seed, double scale = 1.0) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> dist(0.0, scale);
  std::vector<double> v(n);
  for (double& x : v) x = dist(gen);
  return v;
}

// Data on the 256 levels of [-1, 1], as images rescaled from uint8.
std::vector<double> random_pixels(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int> level(0, 255);
  std::vector<double> v(n);
  for (double& x : v) x = -1.0 + 2.0 * level(gen) / 255.0;
  return v;
}

double rel_l2(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0.0, den = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / den);
}

double mean(const std::vector<double>& v) {
  double s = 0.0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Elementwise probability helpers

TEST(DiffusionMath, NormalKlIsZeroForEqualGaussiansAndMatchesClosedForm) {
  EXPECT_EQ(dd::normal_kl(0.3, 0.0, 0.3, 0.0), 0.0);
  EXPECT_NEAR(dd::normal_kl(0.3, -1.2, 0.3, -1.2), 0.0, 1e-15);  // roundoff of -1 + lv2 - lv1 + 1
  // KL(N(0, 1) || N(1, e^2)) = log(s2 / s1) + (s1^2 + (m1 - m2)^2) / (2 s2^2) - 1/2 = 0.5 + e^-2.
  EXPECT_NEAR(dd::normal_kl(0.0, 0.0, 1.0, 2.0), 0.5 + std::exp(-2.0), 1e-15);
  // KL(N(2, 4) || N(-1, 0.25)) = log(0.5 / 2) + (4 + 9) / 0.5 - 0.5.
  EXPECT_NEAR(dd::normal_kl(2.0, std::log(4.0), -1.0, std::log(0.25)), std::log(0.25) + 26.0 - 0.5,
              1e-13);
}

TEST(DiffusionMath, ApproxCdfIsCloseToTheNormalCdf) {
  EXPECT_DOUBLE_EQ(dd::approx_standard_normal_cdf(0.0), 0.5);
  for (double x = -4.0; x <= 4.0; x += 0.25) {
    const double exact = 0.5 * std::erfc(-x / std::sqrt(2.0));
    EXPECT_NEAR(dd::approx_standard_normal_cdf(x), exact, 1e-3) << x;
    EXPECT_NEAR(dd::approx_standard_normal_cdf(x) + dd::approx_standard_normal_cdf(-x), 1.0, 1e-15);
  }
}

TEST(DiffusionMath, DiscretizedLikelihoodSumsToOneOverAll256Bins) {
  for (double m : {0.0, 0.3, -0.7, 0.95, -1.0}) {
    for (double log_scale : {-4.0, -2.0, -0.5, 0.0, 0.7}) {
      double total = 0.0;
      for (int k = 0; k < 256; ++k)
        total +=
            std::exp(dd::discretized_gaussian_log_likelihood(-1.0 + 2.0 * k / 255.0, m, log_scale));
      EXPECT_NEAR(total, 1.0, 1e-6) << "mean " << m << " log_scale " << log_scale;
    }
  }
}

TEST(DiffusionMath, ElementwiseDerivativesMatchFiniteDifferences) {
  const double h = 1e-6;
  // Interior bin, both edge bins, several scales.
  for (double x : {-1.0, -1.0 + 2.0 / 255.0, 0.2, 1.0}) {
    for (double m : {x - 0.03, x + 0.01, 0.0}) {
      for (double s : {-4.0, -2.5, -1.0}) {
        const double fd = (dd::discretized_gaussian_log_likelihood(x, m, s + h) -
                           dd::discretized_gaussian_log_likelihood(x, m, s - h)) /
                          (2 * h);
        const double an = dd::discretized_gaussian_log_likelihood_dlogscale(x, m, s);
        EXPECT_NEAR(an, fd, 1e-6 * std::max(1.0, std::abs(fd))) << x << " " << m << " " << s;
      }
    }
  }
  // Far in the tail the probability is clamped to 1e-12: the value is flat, the derivative 0.
  EXPECT_DOUBLE_EQ(dd::discretized_gaussian_log_likelihood(0.0, 0.9, -5.0), std::log(1e-12));
  EXPECT_EQ(dd::discretized_gaussian_log_likelihood_dlogscale(0.0, 0.9, -5.0), 0.0);
  for (double lv2 : {-3.0, 0.0, 1.5}) {
    const double fd =
        (dd::normal_kl(0.2, -1.0, -0.4, lv2 + h) - dd::normal_kl(0.2, -1.0, -0.4, lv2 - h)) /
        (2 * h);
    EXPECT_NEAR(dd::normal_kl_dlogvar2(0.2, -1.0, -0.4, lv2), fd, 1e-8);
  }
}

// ---------------------------------------------------------------------------------------------
// Schedules and respacing

TEST(DiffusionSchedule, LinearScheduleMatchesHandComputation) {
  const dd::Schedule s = dd::create_diffusion({"", true, 1000});
  ASSERT_EQ(s.num_timesteps, 1000);
  EXPECT_DOUBLE_EQ(s.alphas_cumprod[0], 1.0 - 1e-4);
  // create_diffusion always respaces (as the official SpacedDiffusion): betas come back from
  // 1 - abar_t / abar_{t-1}, within an ulp or so of the linspace values.
  EXPECT_EQ(dd::linear_betas(1000).back(), 0.02);
  EXPECT_NEAR(s.betas[999], 0.02, 1e-15);
  EXPECT_EQ(s.alphas_cumprod_prev[0], 1.0);
  EXPECT_EQ(s.alphas_cumprod_next[999], 0.0);
  EXPECT_EQ(s.posterior_variance[0], 0.0);
  EXPECT_EQ(s.posterior_log_variance_clipped[0], s.posterior_log_variance_clipped[1]);
  for (int t = 0; t < 1000; ++t) EXPECT_EQ(s.timestep_map[t], t);

  // beta_i = 1e-4 + i (0.02 - 1e-4) / 999;
  // posterior variance at t = beta_t (1 - abar_{t-1}) / (1 - abar_t).
  const int t = 500;
  double abar_prev = 1.0;
  for (int i = 0; i < t; ++i) abar_prev *= 1.0 - (1e-4 + i * (0.02 - 1e-4) / 999.0);
  const double beta_t = 1e-4 + t * (0.02 - 1e-4) / 999.0;
  const double abar = abar_prev * (1.0 - beta_t);
  const double var = beta_t * (1.0 - abar_prev) / (1.0 - abar);
  EXPECT_NEAR(s.posterior_variance[t], var, 1e-12 * var);
  EXPECT_NEAR(s.posterior_log_variance_clipped[t], std::log(var), 1e-12);
  EXPECT_NEAR(s.posterior_mean_coef1[t], beta_t * std::sqrt(abar_prev) / (1.0 - abar), 1e-12);
  EXPECT_NEAR(s.sqrt_recipm1_alphas_cumprod[t], std::sqrt(1.0 / abar - 1.0), 1e-10);
  // Other lengths keep the same endpoints in "per 1000 steps" units: scale = 1000 / T.
  const std::vector<double> b = dd::linear_betas(250);
  EXPECT_DOUBLE_EQ(b.front(), 4e-4);
  EXPECT_DOUBLE_EQ(b.back(), 0.08);
}

TEST(DiffusionSchedule, SpaceTimestepsMatchesTheOfficialAlgorithm) {
  std::vector<int> ddim = dd::space_timesteps(1000, "ddim50");
  ASSERT_EQ(ddim.size(), 50u);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(ddim[i], 20 * i);
  EXPECT_EQ(dd::space_timesteps(1000, "10"),
            (std::vector<int>{0, 111, 222, 333, 444, 555, 666, 777, 888, 999}));
  EXPECT_EQ(dd::space_timesteps(10, "2,3"), (std::vector<int>{0, 4, 5, 7, 9}));
  EXPECT_EQ(dd::space_timesteps(7, "3,1"), (std::vector<int>{0, 2, 3, 4}));  // first section longer
  EXPECT_EQ(dd::space_timesteps(6, "3"), (std::vector<int>{0, 2, 5}));       // round(2.5) = 2
  EXPECT_EQ(dd::space_timesteps(300, "10,15,20"),
            (std::vector<int>{0,   11,  22,  33,  44,  55,  66,  77,  88,  99,  100, 107,
                              114, 121, 128, 135, 142, 149, 157, 164, 171, 178, 185, 192,
                              199, 200, 205, 210, 216, 221, 226, 231, 236, 242, 247, 252,
                              257, 263, 268, 273, 278, 283, 289, 294, 299}));
  const std::vector<int> all = dd::space_timesteps(1000, "1000");
  ASSERT_EQ(all.size(), 1000u);
  EXPECT_EQ(all.back(), 999);
  EXPECT_EQ(dd::space_timesteps(1000, "250").size(), 250u);
}

TEST(DiffusionSchedule, BadRespacingStringsThrow) {
  for (const char* bad : {"", "abc", "10,,5", "2000", "0", "-5", "ddim", "ddim600", "ddimx", "1.5"})
    EXPECT_THROW(dd::space_timesteps(1000, bad), dit::Error) << '"' << bad << '"';
  EXPECT_THROW(dd::linear_betas(1), dit::Error);
  EXPECT_THROW(dd::make_schedule({0.1, 1.5}, dd::VarianceKind::kFixedLarge), dit::Error);
}

TEST(DiffusionSchedule, RespacedScheduleKeepsCumulativeAlphasOfKeptSteps) {
  const dd::Schedule base = dd::create_diffusion({"", true, 1000});
  const dd::Schedule s = dd::create_diffusion({"10", true, 1000});
  ASSERT_EQ(s.num_timesteps, 10);
  for (int j = 0; j < 10; ++j) {
    EXPECT_EQ(s.timestep_map[j], 111 * j);
    EXPECT_NEAR(s.alphas_cumprod[j], base.alphas_cumprod[111 * j], 1e-13);
  }
  EXPECT_EQ(s.model_timesteps(std::vector<std::int64_t>{9, 0, 4}),
            (std::vector<std::int64_t>{999, 0, 444}));
  EXPECT_THROW(s.model_timesteps(std::vector<std::int64_t>{10}), dit::Error);
}

// ---------------------------------------------------------------------------------------------
// Training loss

TEST(DiffusionLoss, QSampleMatchesClosedForm) {
  const dd::Schedule s = dd::create_diffusion({"", false, 1000});
  const std::vector<double> x0{0.5, -1.0}, noise{1.0, 2.0};
  const std::vector<std::int64_t> t{0, 999};
  const std::vector<double> xt = dd::q_sample(s, x0, t, noise);
  EXPECT_NEAR(xt[0], std::sqrt(1.0 - 1e-4) * 0.5 + 0.01 * 1.0, 1e-15);
  EXPECT_NEAR(xt[1], -s.sqrt_alphas_cumprod[999] + 2.0 * std::sqrt(1.0 - s.alphas_cumprod[999]),
              1e-15);
}

TEST(DiffusionLoss, PerfectPredictionHasZeroMseAndKl) {
  const dd::Schedule s = dd::create_diffusion({"", true, 1000});
  const dd::ImageShape shape{2, 1, 2, 2};
  const std::vector<double> x0{0.2, -0.4, 0.6, 0.0, 0.2, -0.4, 0.6, 0.0};
  const std::vector<double> noise = randn(8, 7);
  // eps = noise and v = -1 (log variance = the true posterior's): the KL is 0 at t > 0; at t = 0
  // the mean is x_0 and the interior-bin NLL is -log(2 Phi(1/255 / sigma) - 1) / log 2.
  std::vector<double> out(16, -1.0);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j) out[i * 8 + j] = noise[i * 4 + j];
  const std::vector<std::int64_t> t{0, 600};
  const dd::LossTerms r = dd::training_losses(s, shape, {out, x0, noise, t});
  EXPECT_EQ(r.mse[0], 0.0);
  EXPECT_EQ(r.mse[1], 0.0);
  EXPECT_NEAR(r.vb[1], 0.0, 1e-12);
  const double sigma = std::exp(0.5 * s.posterior_log_variance_clipped[0]);
  const double nll = -std::log(2.0 * dd::approx_standard_normal_cdf(1.0 / 255.0 / sigma) - 1.0);
  EXPECT_NEAR(r.vb[0], nll / std::numbers::ln2, 1e-9);
  EXPECT_GT(r.vb[0], 0.0);
  EXPECT_EQ(r.loss[0], r.mse[0] + r.vb[0]);
}

namespace {

// Central finite differences of the loss w.r.t. every element of model_output. The official
// loss detaches eps inside the VB term, so the reference for eps channels is d mean(mse) and for
// the variance channels d mean(loss) (mse does not depend on them).
std::vector<double> finite_difference_grad(const dd::Schedule& s, const dd::ImageShape& shape,
                                           std::vector<double> out, const std::vector<double>& x0,
                                           const std::vector<double>& noise,
                                           const std::vector<std::int64_t>& t, double h) {
  const std::int64_t p = shape.per_sample(), row = s.out_channels(shape.c) * shape.h * shape.w;
  std::vector<double> fd(out.size());
  for (std::size_t k = 0; k < out.size(); ++k) {
    const bool eps_channel = static_cast<std::int64_t>(k) % row < p;
    auto eval = [&](double delta) {
      std::vector<double> o = out;
      o[k] += delta;
      const dd::LossTerms r = dd::training_losses(s, shape, {o, x0, noise, t});
      return eps_channel ? mean(r.mse) : mean(r.loss);
    };
    fd[k] = (eval(h) - eval(-h)) / (2 * h);
  }
  return fd;
}

struct LossCase {
  dd::ImageShape shape{4, 2, 3, 3};
  std::vector<double> x0, noise, out;
  std::vector<std::int64_t> t{0, 1, 500, 999};
};

LossCase make_loss_case(const dd::Schedule& s) {
  LossCase c;
  const auto n = static_cast<std::size_t>(c.shape.numel());
  c.x0 = random_pixels(n, 11);
  // Pixels on both edges (x = -1, x = +1) in the t = 0 sample hit the tail branches.
  for (std::size_t j : {0, 4, 9}) c.x0[j] = -1.0;
  for (std::size_t j : {2, 7, 13}) c.x0[j] = 1.0;
  c.noise = randn(n, 12);
  c.out = randn(static_cast<std::size_t>(c.shape.n * s.out_channels(c.shape.c) * 9), 13, 0.7);
  return c;
}

}  // namespace

TEST(DiffusionLoss, LearnedSigmaGradientMatchesFiniteDifferences) {
  const dd::Schedule s = dd::create_diffusion({"", true, 1000});
  const LossCase c = make_loss_case(s);
  const dd::LossTerms r = dd::training_losses(s, c.shape, {c.out, c.x0, c.noise, c.t});
  ASSERT_EQ(r.vb.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_GT(r.vb[i], 0.0);
    EXPECT_NEAR(r.loss[i], r.mse[i] + r.vb[i], 1e-15);
  }
  const std::vector<double> fd =
      finite_difference_grad(s, c.shape, c.out, c.x0, c.noise, c.t, 1e-5);
  const double err = rel_l2(r.grad_model_output, fd);
  EXPECT_LT(err, 1e-6);
  // Every sample's variance channels, the t = 0 one included, carry gradient.
  for (int i = 0; i < 4; ++i) {
    double norm = 0.0;
    for (int j = 18; j < 36; ++j) norm += std::abs(r.grad_model_output[i * 36 + j]);
    EXPECT_GT(norm, 0.0) << "sample " << i;
  }
  // The detach matters: differentiating the full loss through eps would differ.
  std::vector<double> o = c.out;
  const double h = 1e-5;
  o[0] += h;
  const double up = mean(dd::training_losses(s, c.shape, {o, c.x0, c.noise, c.t}).loss);
  o[0] -= 2 * h;
  const double down = mean(dd::training_losses(s, c.shape, {o, c.x0, c.noise, c.t}).loss);
  EXPECT_GT(std::abs((up - down) / (2 * h) - r.grad_model_output[0]), 1e-4);
  std::printf("learn_sigma gradient vs finite differences: rel L2 %.3e\n", err);
}

TEST(DiffusionLoss, FixedVarianceGradientMatchesFiniteDifferences) {
  const dd::Schedule s = dd::create_diffusion({"", false, 1000});
  const LossCase c = make_loss_case(s);
  const dd::LossTerms r = dd::training_losses(s, c.shape, {c.out, c.x0, c.noise, c.t});
  EXPECT_TRUE(r.vb.empty());
  EXPECT_EQ(r.loss, r.mse);
  const std::vector<double> fd =
      finite_difference_grad(s, c.shape, c.out, c.x0, c.noise, c.t, 1e-5);
  const double err = rel_l2(r.grad_model_output, fd);
  EXPECT_LT(err, 1e-6);
  std::printf("fixed-variance gradient vs finite differences: rel L2 %.3e\n", err);
}

TEST(DiffusionLoss, BadInputsThrow) {
  const dd::Schedule s = dd::create_diffusion({"", true, 1000});
  const LossCase c = make_loss_case(s);
  std::vector<std::int64_t> bad_t = c.t;
  bad_t[1] = 1000;
  EXPECT_THROW(dd::training_losses(s, c.shape, {c.out, c.x0, c.noise, bad_t}), dit::Error);
  std::vector<double> short_out(c.out.begin(), c.out.end() - 1);
  EXPECT_THROW(dd::training_losses(s, c.shape, {short_out, c.x0, c.noise, c.t}), dit::Error);
  const std::vector<std::int64_t> short_t{0, 1};
  EXPECT_THROW(dd::training_losses(s, c.shape, {c.out, c.x0, c.noise, short_t}), dit::Error);
}

// ---------------------------------------------------------------------------------------------
// Sampling

TEST(DiffusionSampling, PerfectEpsilonRecoversTheStartAndThePosteriorMean) {
  const dd::Schedule s = dd::create_diffusion({"10", false, 1000});
  const dd::ImageShape shape{2, 2, 2, 2};
  const std::vector<double> x0 = random_pixels(16, 21), eps = randn(16, 22);
  const std::vector<std::int64_t> t{0, 6};
  const std::vector<double> xt = dd::q_sample(s, x0, t, eps);
  const dd::MeanVariance mv = dd::p_mean_variance(s, shape, eps, xt, t, dd::ClipDenoised::kNo);
  for (std::size_t k = 0; k < 16; ++k) {
    const std::size_t ti = static_cast<std::size_t>(t[k / 8]);
    EXPECT_NEAR(mv.pred_xstart[k], x0[k], 1e-12);
    EXPECT_NEAR(mv.mean[k], s.posterior_mean_coef1[ti] * x0[k] + s.posterior_mean_coef2[ti] * xt[k],
                1e-12);
  }
  // FIXED_LARGE: the posterior variance at t = 1 for t = 0, beta_t after.
  EXPECT_EQ(mv.variance[0], s.posterior_variance[1]);
  EXPECT_EQ(mv.variance[8], s.betas[6]);
  EXPECT_NEAR(mv.log_variance[8], std::log(s.betas[6]), 1e-15);

  // DDIM with eta = 0 keeps the same noise:
  //   x_{t-1} = sqrt(abar_prev) x_0 + sqrt(1 - abar_prev) eps.
  const dd::StepResult d = dd::ddim_sample(s, shape, eps, xt, t, {}, 0.0, dd::ClipDenoised::kNo);
  for (std::size_t k = 0; k < 16; ++k) {
    const double ap = s.alphas_cumprod_prev[static_cast<std::size_t>(t[k / 8])];
    EXPECT_NEAR(d.sample[k], std::sqrt(ap) * x0[k] + std::sqrt(1.0 - ap) * eps[k], 1e-12);
  }
}

TEST(DiffusionSampling, StepNoiseScales) {
  const dd::Schedule s = dd::create_diffusion({"10", true, 1000});
  const dd::ImageShape shape{2, 1, 1, 2};
  // Variance channel v = 1 gives beta_t, v = -1 the clipped posterior variance.
  const std::vector<double> out{0.3, -0.2, 1.0, -1.0, 0.1, 0.5, 1.0, -1.0};
  const std::vector<double> x{0.7, -0.1, 0.4, 0.9}, noise{1.0, -2.0, 0.5, 3.0}, zero(4, 0.0);
  const std::vector<std::int64_t> t{0, 6};
  const dd::StepResult a = dd::p_sample(s, shape, out, x, t, noise, dd::ClipDenoised::kNo);
  const dd::StepResult b = dd::p_sample(s, shape, out, x, t, zero, dd::ClipDenoised::kNo);
  EXPECT_EQ(a.sample[0], b.sample[0]);  // no noise at t = 0
  EXPECT_EQ(a.sample[1], b.sample[1]);
  EXPECT_NEAR(a.sample[2] - b.sample[2], std::sqrt(s.betas[6]) * 0.5, 1e-12);
  EXPECT_NEAR(a.sample[3] - b.sample[3], std::exp(0.5 * s.posterior_log_variance_clipped[6]) * 3.0,
              1e-12);
  EXPECT_NE(b.sample[2], 0.0);

  // DDIM with eta = 1: sigma^2 = (1 - abar_prev) / (1 - abar) (1 - abar / abar_prev)
  //                            = the posterior variance.
  const dd::StepResult c = dd::ddim_sample(s, shape, out, x, t, noise, 1.0, dd::ClipDenoised::kNo);
  const dd::StepResult e = dd::ddim_sample(s, shape, out, x, t, zero, 1.0, dd::ClipDenoised::kNo);
  EXPECT_EQ(c.sample[0], e.sample[0]);
  EXPECT_NEAR(c.sample[2] - e.sample[2], std::sqrt(s.posterior_variance[6]) * 0.5, 1e-12);

  // Clipping keeps the x_0 prediction in [-1, 1].
  const std::vector<double> big{400.0, -400.0, 0.0, 0.0, 400.0, -400.0, 0.0, 0.0};
  const dd::MeanVariance mv = dd::p_mean_variance(s, shape, big, x, t, dd::ClipDenoised::kYes);
  for (double v : mv.pred_xstart) EXPECT_LE(std::abs(v), 1.0);
  EXPECT_EQ(mv.pred_xstart[0], -1.0);
  EXPECT_THROW(dd::p_sample(s, shape, out, x, t, std::vector<double>(3), dd::ClipDenoised::kNo),
               dit::Error);
}

TEST(DiffusionSampling, CfgCombineGuidesTheFirstChannelsAndKeepsTheRest) {
  // Doubled batch of 2 (cond row 0, uncond row 1), 4 output channels of 1 pixel, 3 guided.
  const dd::ImageShape shape{2, 4, 1, 1};
  const std::vector<double> out{1.0, 2.0, 3.0, 4.0, 0.5, 1.0, -1.0, 7.0};
  const std::vector<double> g = dd::cfg_combine(shape, out, 4.0, 3);
  const std::vector<double> expect{0.5 + 4.0 * 0.5, 1.0 + 4.0 * 1.0, -1.0 + 4.0 * 4.0, 4.0,
                                   0.5 + 4.0 * 0.5, 1.0 + 4.0 * 1.0, -1.0 + 4.0 * 4.0, 7.0};
  EXPECT_EQ(g, expect);
  EXPECT_EQ(
      dd::cfg_combine(shape, out, 1.0, 4),
      (std::vector<double>{1.0, 2.0, 3.0, 4.0, 1.0, 2.0, 3.0, 4.0}));  // scale 1: the cond output
  EXPECT_THROW(dd::cfg_combine({3, 4, 1, 1}, std::vector<double>(12), 4.0, 3), dit::Error);
  EXPECT_THROW(dd::cfg_combine(shape, out, 4.0, 5), dit::Error);
}
