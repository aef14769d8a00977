// One reverse-diffusion step in float64, given the model output for x_t: the official
// p_mean_variance, p_sample (DDPM) and ddim_sample, and the classifier-free-guidance combine of
// forward_with_cfg. Noise is passed in, so a step is a pure function the tests can pin down.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "diffusion/noise_schedule.h"

namespace dit::diffusion {

// Whether the x_0 prediction is clamped to [-1, 1] before it forms the mean (clip_denoised).
enum class ClipDenoised { kNo, kYes };

// p(x_{t-1} | x_t) = N(mean, variance), every array (n, c, h, w).
struct MeanVariance {
  std::vector<double> pred_xstart;   // sqrt(1/abar_t) x_t - sqrt(1/abar_t - 1) eps, maybe clipped
  std::vector<double> mean;          // coef1_t pred_xstart + coef2_t x_t
  std::vector<double> variance;      // exp(log_variance)
  std::vector<double> log_variance;  // learned range, or log of the FIXED_LARGE variance
};

// model_output: (n, out_channels(c), h, w); x: x_t (n, c, h, w); t: (n,) schedule indices.
MeanVariance p_mean_variance(const Schedule& schedule, const ImageShape& shape,
                             std::span<const double> model_output, std::span<const double> x,
                             std::span<const std::int64_t> t, ClipDenoised clip);

struct StepResult {
  std::vector<double> sample;       // x_{t-1}, (n, c, h, w)
  std::vector<double> pred_xstart;  // (n, c, h, w)
};

// DDPM: x_{t-1} = mean + [t != 0] exp(log_variance / 2) noise; noise is (n, c, h, w).
StepResult p_sample(const Schedule& schedule, const ImageShape& shape,
                    std::span<const double> model_output, std::span<const double> x,
                    std::span<const std::int64_t> t, std::span<const double> noise,
                    ClipDenoised clip);

// DDIM (Song et al. eq. 12), eps re-derived from pred_xstart:
//   sigma = eta sqrt((1 - abar_prev) / (1 - abar)) sqrt(1 - abar / abar_prev)
//   x_{t-1} = pred_xstart sqrt(abar_prev) + sqrt(1 - abar_prev - sigma^2) eps
//             + [t != 0] sigma noise.
// noise may be empty when eta == 0 (then it has no effect).
StepResult ddim_sample(const Schedule& schedule, const ImageShape& shape,
                       std::span<const double> model_output, std::span<const double> x,
                       std::span<const std::int64_t> t, std::span<const double> noise, double eta,
                       ClipDenoised clip);

// Classifier-free guidance on the output of a doubled batch (rows [0, n/2) conditional, rows
// [n/2, n) with the null label, both on the same x and t), as the official forward_with_cfg:
//   g = uncond + scale (cond - uncond) on channels [0, guided_channels), written to both halves;
//   channels [guided_channels, c_out) (the rest of eps, the variance) stay as each row had them.
// The official code guides 3 channels; the project's default guides all data channels.
// model_output: (n, c_out, h, w) with n even; shape.c here is c_out, the output channels.
std::vector<double> cfg_combine(const ImageShape& out_shape, std::span<const double> model_output,
                                double scale, std::int64_t guided_channels);

}  // namespace dit::diffusion
