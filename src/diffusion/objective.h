// The training objectives beside DiT's DDPM, in float64 with their derivations: SiT's linear
// flow interpolant with velocity prediction (x_t = t x1 + (1 - t) x0, t = 0 noise, t = 1 data,
// target u = x1 - x0), LightningDiT's cosine term, the timestep distributions (uniform and
// logit-normal, t = sigmoid(m + s u)) and Min-SNR-gamma weighting of epsilon prediction
// (Hang et al. 2023). The backends' kernels use the same math from backend/math.h.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/math.h"
#include "core/named.h"
#include "core/philox.h"
#include "diffusion/noise_schedule.h"

namespace dit::diffusion {

// What the model learns. ddpm: the official DiT (epsilon, optional learned variance, discrete t
// fed as the original timestep index); flow: SiT's linear path, velocity, t in [0, 1] fed as is.
enum class Objective : std::uint8_t { Ddpm, Flow };
inline constexpr Named<Objective> kObjectiveNames[] = {{Objective::Ddpm, "ddpm"}, {Objective::Flow, "flow"}};

// How a training sample's t is drawn. uniform: the official (ddpm: an index in [0, T); flow:
// t ~ U[0, 1)); logit_normal (flow): t = sigmoid(m + s u), u ~ N(0, 1) (SD3, LightningDiT).
enum class TimestepSampling : std::uint8_t { Uniform, LogitNormal };
inline constexpr Named<TimestepSampling> kTimestepSamplingNames[] = {
    {TimestepSampling::Uniform, "uniform"}, {TimestepSampling::LogitNormal, "logit_normal"}};

// Per-sample weighting of the MSE term. min_snr: min(SNR_t, gamma) / SNR_t, SNR_t = abar_t /
// (1 - abar_t), for epsilon prediction (the VB term stays unweighted, as the reference).
enum class LossWeight : std::uint8_t { None, MinSnr };
inline constexpr Named<LossWeight> kLossWeightNames[] = {{LossWeight::None, "none"}, {LossWeight::MinSnr, "min_snr"}};

// The samplers: ddim and ddpm for the ddpm objective; euler, heun (fixed-step ODE) and
// euler_maruyama (SiT's SDE) for flow.
enum class SamplerKind : std::uint8_t { Ddim, Ddpm, Euler, Heun, EulerMaruyama };
inline constexpr Named<SamplerKind> kSamplerNames[] = {{SamplerKind::Ddim, "ddim"},
                                                       {SamplerKind::Ddpm, "ddpm"},
                                                       {SamplerKind::Euler, "euler"},
                                                       {SamplerKind::Heun, "heun"},
                                                       {SamplerKind::EulerMaruyama, "euler_maruyama"}};
// Whether `s` integrates models of objective `o`.
constexpr bool sampler_fits(SamplerKind s, Objective o) {
  return (s == SamplerKind::Ddim || s == SamplerKind::Ddpm) == (o == Objective::Ddpm);
}
// "ddim or ddpm" / "euler, heun or euler_maruyama": the samplers of an objective, for messages.
const char* samplers_of(Objective o);

struct TimestepOptions {
  TimestepSampling sampling = TimestepSampling::Uniform;
  double mean = 0.0, std = 1.0;  // of u before the sigmoid (logit_normal)
};

// The logit-normal map of a standard normal u: sigmoid(mean + std u) = 1 / (1 + exp(-(m + s u))),
// in (0, 1) (SiT's time; the linear path's training interval is [0, 1], so no rescaling).
double logit_normal_t(double u, double mean, double std);

// Min-SNR-gamma weight of schedule index t: min(SNR, gamma) / SNR, SNR = (sqrt(abar) /
// sqrt(1 - abar))^2 (the reference's order of operations); 1 where SNR is 0.
double min_snr_weight(const Schedule& schedule, std::int64_t t, double gamma);

// Whether LightningDiT's 1 - cos(v_pred, u) term is added to the flow loss.
enum class CosineTerm : std::uint8_t { No, Yes };

// How the MSE term is weighted per timestep (diffusion.loss_weight, diffusion.min_snr_gamma).
struct LossWeighting {
  LossWeight weight = LossWeight::None;
  double min_snr_gamma = 5.0;
};

// The [diffusion] recipe of a training run.
struct TrainObjective {
  Objective objective = Objective::Ddpm;
  TimestepOptions timesteps;
  CosineTerm cosine = CosineTerm::No;  // flow only
  LossWeighting weighting;             // ddpm only
};

// What the backend's loss kernel computes for this recipe (learn_sigma: model.learn_sigma).
math::LossKind loss_kind(const TrainObjective& o, bool learn_sigma);

// A training sample's time: ddpm uses the schedule index, flow the continuous t in [0, 1].
struct DrawnTime {
  std::int64_t index = 0;
  double t = 0.0;
};
// Draws it from `rng` (the sample's RngPurpose::Timestep stream): ddpm takes below(T) (the
// official randint); flow uniform uniform_f64() (SiT's rand on [t0, t1) = [0, 1)); flow
// logit_normal one normal u (Philox::normal) and logit_normal_t(u). ddpm with logit_normal is
// refused by the config (no reference maps the continuous density to DDPM's discrete steps).
DrawnTime draw_time(Philox& rng, const TrainObjective& o, int num_timesteps);

// One flow-loss evaluation: the data x1, the noise x0 and each sample's t; the model output is
// the velocity at x_t = t x1 + (1 - t) x0. Arrays (n, c, h, w) but t (n,).
struct FlowLossInputs {
  std::span<const double> model_output;  // v_pred
  std::span<const double> x1;            // data
  std::span<const double> x0;            // noise
};

struct FlowLossTerms {
  std::vector<double> loss;  // (n,) mse + cos
  std::vector<double> mse;   // (n,) mean over (c, h, w) of (v_pred - u)^2
  std::vector<double> cos;   // (n,) mean over (h, w) of 1 - cos_c(v_pred, u); empty without the term
  std::vector<double> grad_model_output;  // d mean_n(loss) / d v_pred
};

// x_t = t x1 + (1 - t) x0 per sample (SiT's ICPlan: alpha_t = t, sigma_t = 1 - t).
std::vector<double> flow_xt(const ImageShape& shape, std::span<const double> x1, std::span<const double> x0,
                            std::span<const double> t);

// SiT's velocity loss: mse = mean_flat((v_pred - u)^2), u = x1 - x0; with the cosine term,
// cos = mean over pixels of 1 - <v, u> / (max(|v|, 1e-8) max(|u|, 1e-8)) with the dot product and
// norms over channels (torch cosine_similarity(dim=1)), and loss = mse + cos (LightningDiT adds
// the batch means). Gradient: d mse / d v = 2 (v - u) / P; d (1 - cos) / d v_c =
// -(u_c / (|v| |u|) - cos v_c / |v|^2), divided by the pixel count.
FlowLossTerms flow_training_losses(const ImageShape& shape, const FlowLossInputs& in, CosineTerm cosine);

// ---- flow samplers (SiT's integrators over t from 0 to 1) --------------------------------------

// Whether a model call at flow time t is guided: its noise level 1 - t lies in [t_min, t_max]
// (sample.cfg_t_min, cfg_t_max; LightningDiT's cfg_interval_start s is t_max = 1 - s).
inline bool flow_guided(double t, double t_min, double t_max) {
  const double level = 1.0 - t;
  return level >= t_min && level <= t_max;
}

// The grid SiT integrates on: linspace(t0, t1, num_steps); ODE: [0, 1]; SDE: [0, 1 - last_step].
std::vector<double> flow_time_grid(int num_steps, double t0, double t1);

// Euler (torchdiffeq "euler"): x + (t_next - t) v(x, t).
std::vector<double> euler_step(std::span<const double> x, std::span<const double> v, double dt);
// Heun (torchdiffeq "heun2"): k1 = v(x, t), k2 = v(x + dt k1, t + dt), x + dt / 2 (k1 + k2).
// heun_predict gives the point k2 is evaluated at; heun_correct the step.
std::vector<double> heun_predict(std::span<const double> x, std::span<const double> k1, double dt);
std::vector<double> heun_correct(std::span<const double> x, std::span<const double> k1,
                                 std::span<const double> k2, double dt);

// SiT's SDE with the diffusion form "sigma" (its default, norm 1): w(t) = 1 - t, the score of the
// linear path from the velocity s = (t v - x) / (1 - t) (reverse_alpha_ratio t, variance 1 - t),
// drift = v + w s. Euler-Maruyama: x + drift dt + sqrt(2 w) sqrt(dt) noise.
std::vector<double> flow_sde_drift(std::span<const double> x, std::span<const double> v, double t);
std::vector<double> euler_maruyama_step(std::span<const double> x, std::span<const double> v, double t,
                                        double dt, std::span<const double> noise);
// The last step "Mean" at t1 = 1 - last_step_size: x + drift(x, t1) last_step_size.
std::vector<double> sde_mean_last_step(std::span<const double> x, std::span<const double> v, double t,
                                       double last_step_size);

}  // namespace dit::diffusion
