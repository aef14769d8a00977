// The float64 references of the flow objective, the timestep maps, Min-SNR weights and the flow
// sampler steps (diffusion/objective.h): closed forms, finite differences and the identities the
// reference code's formulas reduce to on the linear path.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/philox.h"
#include "diffusion/losses.h"
#include "diffusion/objective.h"

namespace dit::diffusion {
namespace {

using Vec = std::vector<double>;

Vec normals(std::size_t n, std::uint64_t seed, double scale = 1.0) {
  Philox rng(seed, RngPurpose::Test, 0, 0);
  Vec v(n);
  for (double& x : v) x = scale * rng.normal();
  return v;
}

TEST(Objective, LogitNormalMapIsTheSigmoidOfTheShiftedNormal) {
  EXPECT_DOUBLE_EQ(logit_normal_t(0.0, 0.0, 1.0), 0.5);
  for (double u : {-3.0, -0.4, 0.0, 1.1, 4.0}) {
    const double m = 0.3, s = 0.8, z = m + s * u;
    EXPECT_NEAR(logit_normal_t(u, m, s), std::exp(z) / (1.0 + std::exp(z)), 1e-15);
    EXPECT_NEAR(logit_normal_t(u, 0.0, 1.0) + logit_normal_t(-u, 0.0, 1.0), 1.0, 1e-15);  // symmetric at m = 0
  }
}

TEST(Objective, MinSnrWeightIsGammaOverSnrAboveGammaAndOneBelow) {
  const Schedule sc = create_diffusion({"", false, 1000});
  for (std::int64_t t : {0, 10, 100, 300, 999}) {
    const double ab = sc.alphas_cumprod[t], snr = ab / (1.0 - ab);
    const double w = min_snr_weight(sc, t, 5.0);
    if (snr > 5.0) EXPECT_NEAR(w, 5.0 / snr, 1e-12 * w) << t;
    else EXPECT_DOUBLE_EQ(w, 1.0) << t;
  }
  EXPECT_LT(min_snr_weight(sc, 0, 5.0), 1e-3);  // SNR ~ 1e4 at the first step
  // The weights reach the kernels through the table's kLossWeight column; 1 without weighting.
  const auto with = loss_coef_table(sc, {LossWeight::MinSnr, 5.0}), without = loss_coef_table(sc);
  EXPECT_FLOAT_EQ(with[10 * math::kNumLossCoefs + math::kLossWeight], static_cast<float>(min_snr_weight(sc, 10, 5.0)));
  EXPECT_EQ(without[10 * math::kNumLossCoefs + math::kLossWeight], 1.f);
}

// The gradient of mean_n(loss) against central differences, with and without the cosine term.
TEST(Objective, FlowLossGradientMatchesFiniteDifferences) {
  const ImageShape shape{2, 3, 2, 2};
  const Vec x1 = normals(24, 1, 0.7), x0 = normals(24, 2), v = normals(24, 3);
  for (CosineTerm cos : {CosineTerm::No, CosineTerm::Yes}) {
    const FlowLossTerms r = flow_training_losses(shape, {v, x1, x0}, cos);
    auto mean_loss = [&](const Vec& vv) {
      const FlowLossTerms t = flow_training_losses(shape, {vv, x1, x0}, cos);
      return (t.loss[0] + t.loss[1]) / 2.0;
    };
    for (std::size_t j = 0; j < v.size(); ++j) {
      Vec a = v, b = v;
      const double h = 1e-6;
      a[j] += h, b[j] -= h;
      EXPECT_NEAR(r.grad_model_output[j], (mean_loss(a) - mean_loss(b)) / (2 * h), 1e-8) << j;
    }
    // mse is the mean of (v - (x1 - x0))^2; the cosine term is 0 for v parallel to u.
    double sq = 0;
    for (std::size_t j = 0; j < 12; ++j) sq += std::pow(v[j] - (x1[j] - x0[j]), 2);
    EXPECT_NEAR(r.mse[0], sq / 12, 1e-14);
    if (cos == CosineTerm::Yes) {
      Vec u(24);
      for (std::size_t j = 0; j < 24; ++j) u[j] = 3.0 * (x1[j] - x0[j]);
      EXPECT_NEAR(flow_training_losses(shape, {u, x1, x0}, cos).cos[1], 0.0, 1e-14);
      EXPECT_NEAR(r.loss[0], r.mse[0] + r.cos[0], 1e-14);
    }
  }
}

TEST(Objective, FlowPathInterpolatesNoiseToData) {
  const ImageShape shape{2, 1, 1, 2};
  const Vec x1 = {1, 2, 3, 4}, x0 = {-1, 0, 1, 0};
  const Vec xt = flow_xt(shape, x1, x0, Vec{0.0, 1.0});
  EXPECT_EQ(xt, (Vec{-1, 0, 3, 4}));  // t = 0 is the noise, t = 1 the data
}

TEST(Objective, OdeStepsIntegrateKnownSolutions) {
  // Euler on a constant velocity is exact; Heun on x' = x is the second-order Taylor step.
  const Vec x = {1.0, -2.0}, v = {0.5, 0.25};
  EXPECT_EQ(euler_step(x, v, 0.1), (Vec{1.05, -1.975}));
  const double dt = 0.1;
  const Vec k1 = x, xp = heun_predict(x, k1, dt), k2 = xp;
  const Vec out = heun_correct(x, k1, k2, dt);
  for (std::size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(out[i], x[i] * (1 + dt + dt * dt / 2), 1e-15);
  const auto grid = flow_time_grid(5, 0.0, 0.96);
  EXPECT_EQ(grid.size(), 5u);
  EXPECT_DOUBLE_EQ(grid[0], 0.0);
  EXPECT_DOUBLE_EQ(grid[4], 0.96);
  EXPECT_NEAR(grid[1], 0.24, 1e-15);
}

// SiT's SDE drift v + w(t) score with w = 1 - t ("sigma") and the linear path's score from the
// velocity, (t v - x) / (1 - t), reduces to (1 + t) v - x.
TEST(Objective, SdeStepsUseTheLinearPathsScoreAndSigmaDiffusion) {
  const Vec x = normals(6, 4), v = normals(6, 5), z = normals(6, 6);
  const double t = 0.37, dt = 0.05;
  const Vec drift = flow_sde_drift(x, v, t);
  for (std::size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(drift[i], (1 + t) * v[i] - x[i], 1e-14);
  const Vec em = euler_maruyama_step(x, v, t, dt, z);
  for (std::size_t i = 0; i < x.size(); ++i)
    EXPECT_NEAR(em[i], x[i] + drift[i] * dt + std::sqrt(2 * (1 - t)) * std::sqrt(dt) * z[i], 1e-14);
  const Vec last = sde_mean_last_step(x, v, 0.96, 0.04);
  for (std::size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(last[i], x[i] + ((1.96) * v[i] - x[i]) * 0.04, 1e-14);
}

TEST(Objective, TimestepsComeFromTheSamplesKeyedStream) {
  TrainObjective ddpm, flow, lognorm;
  flow.objective = lognorm.objective = Objective::Flow;
  lognorm.timesteps = {TimestepSampling::LogitNormal, 0.3, 0.8};
  for (std::uint64_t k = 0; k < 50; ++k) {
    Philox a(7, RngPurpose::Timestep, 3, k), b(7, RngPurpose::Timestep, 3, k), c(7, RngPurpose::Timestep, 3, k);
    const DrawnTime d = draw_time(a, ddpm, 1000);
    EXPECT_EQ(d.index, Philox(7, RngPurpose::Timestep, 3, k).below(1000));  // the official draw, unchanged
    const double tf = draw_time(b, flow, 1000).t;
    EXPECT_GE(tf, 0.0);
    EXPECT_LT(tf, 1.0);
    Philox same(7, RngPurpose::Timestep, 3, k);
    EXPECT_DOUBLE_EQ(draw_time(c, lognorm, 1000).t, logit_normal_t(same.normal(), 0.3, 0.8));
  }
}

TEST(Objective, SamplersBelongToOneObjective) {
  EXPECT_TRUE(sampler_fits(SamplerKind::Ddim, Objective::Ddpm));
  EXPECT_TRUE(sampler_fits(SamplerKind::Ddpm, Objective::Ddpm));
  for (SamplerKind s : {SamplerKind::Euler, SamplerKind::Heun, SamplerKind::EulerMaruyama}) {
    EXPECT_TRUE(sampler_fits(s, Objective::Flow));
    EXPECT_FALSE(sampler_fits(s, Objective::Ddpm));
  }
  EXPECT_FALSE(sampler_fits(SamplerKind::Ddim, Objective::Flow));
  // Guidance at flow time t covers the noise levels 1 - t in [t_min, t_max].
  EXPECT_TRUE(flow_guided(0.9, 0.0, 0.85));   // level 0.1
  EXPECT_FALSE(flow_guided(0.1, 0.0, 0.85));  // level 0.9: above LightningDiT's interval start 0.15
}

}  // namespace
}  // namespace dit::diffusion
