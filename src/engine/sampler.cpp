// The sampling loop (see sampler.h).
#include "engine/sampler.h"

#include <algorithm>

#include "engine/dit_pipeline.h"
#include "engine/global_tensors.h"
#include "core/philox.h"
#include "diffusion/sampling.h"
#include "diffusion/noise_schedule.h"

namespace dit {

namespace {
// Microbatches for a forward-only pass over `rows` rows: the largest divisor of rows <= pp.
int forward_microbatches(std::int64_t rows, int pp) {
  for (int m = std::min<std::int64_t>(pp, rows); m > 1; --m)
    if (rows % m == 0) return m;
  return 1;
}
}  // namespace

SampleRequest sample_request(const SampleSection& s, std::vector<int> labels, int diffusion_steps) {
  SampleRequest req;
  req.labels = std::move(labels);
  req.num_steps = s.num_steps;
  req.sampler = s.sampler;
  req.cfg_scale = s.cfg_scale;
  req.cfg_official = s.cfg_official;
  req.cfg_t_min = s.cfg_t_min;
  req.cfg_t_max = s.cfg_t_max;
  req.diffusion_steps = diffusion_steps;
  req.seed = s.seed;
  return req;
}

std::vector<float> sample_images(Backend& be, ParallelContext& ctx, const DiTStage& stage,
                                 const SampleRequest& req) {
  const DiTConfig& cfg = stage.config();
  // As the official sample.py: evenly respaced steps ("N") for both samplers.
  const std::string respacing = std::to_string(req.num_steps);
  const auto sched = diffusion::create_diffusion({respacing, cfg.learn_sigma, req.diffusion_steps});
  const std::int64_t total = static_cast<std::int64_t>(req.labels.size());
  const std::int64_t per = std::int64_t(cfg.in_channels) * cfg.input_size * cfg.input_size;
  const std::int64_t per_out = std::int64_t(cfg.out_channels()) * cfg.input_size * cfg.input_size;
  // This dp replica's samples [lo, hi).
  const int dp = ctx.layout.dp, r = ctx.coord.dp;
  const std::int64_t lo = total * r / dp, hi = total * (r + 1) / dp, n = hi - lo;
  const bool guided = req.cfg_scale != 1.0;
  const std::int64_t max_rows = guided ? 2 * n : n;

  std::vector<double> x(static_cast<std::size_t>(n * per));
  for (std::int64_t i = 0; i < n; ++i) {
    Philox rng(req.seed, RngPurpose::Sampler, 0, static_cast<std::uint64_t>(req.first_index + lo + i));
    for (std::int64_t j = 0; j < per; ++j) x[i * per + j] = rng.normal();
  }
  std::vector<std::int32_t> y(static_cast<std::size_t>(max_rows));
  for (std::int64_t i = 0; i < n; ++i) {
    y[i] = req.labels[lo + i];
    if (guided) y[n + i] = cfg.num_classes;  // the null label
  }
  PipelineExecutor executor(*ctx.pp, be, ctx.watch.get());
  std::vector<float> out(static_cast<std::size_t>(max_rows * per_out));
  std::vector<float> xin(static_cast<std::size_t>(max_rows * per));
  std::vector<float> tin(static_cast<std::size_t>(max_rows));

  for (int step = sched.num_timesteps - 1; step >= 0 && n > 0; --step) {
    const double level = static_cast<double>(sched.timestep_map[step]) / req.diffusion_steps;
    const bool guide = guided && level >= req.cfg_t_min && level <= req.cfg_t_max;
    const std::int64_t rows = guide ? 2 * n : n;  // outside the interval: the conditional rows alone
    const int m = forward_microbatches(rows, ctx.layout.pp);
    const std::int64_t mb_rows = rows / m;
    for (std::int64_t i = 0; i < rows; ++i) {
      std::copy(x.begin() + (i % n) * per, x.begin() + (i % n + 1) * per, xin.begin() + i * per);
      tin[i] = static_cast<float>(sched.timestep_map[step]);
    }
    DiTPipelineHooks hooks;
    hooks.make_inputs = [&](int mb, StageInputs& in, Arena& arena) {
      const std::int64_t f = mb * mb_rows;
      upload_stage_inputs(be, cfg, mb_rows, {xin.data() + f * per, tin.data() + f, y.data() + f}, in, arena);
    };
    hooks.on_output = [&](int mb, const Tensor& o, Arena&) -> Tensor {
      std::vector<float> v = host_copy(be, o);
      std::copy(v.begin(), v.end(), out.begin() + mb * mb_rows * per_out);
      return {};
    };
    DiTPipelineStage pstage(be, stage, mb_rows, hooks);
    executor.run(make_forward_only(m, ctx.layout.pp, stage.chunks()), m, pstage);

    if (ctx.last_stage()) {
      std::vector<double> o64(out.begin(), out.begin() + rows * per_out);
      if (guide) {
        const std::int64_t guided_ch = req.cfg_official ? std::min(3, cfg.in_channels) : cfg.in_channels;
        o64 = diffusion::cfg_combine({rows, cfg.out_channels(), cfg.input_size, cfg.input_size}, o64,
                                     req.cfg_scale, guided_ch);
        o64.resize(static_cast<std::size_t>(n * per_out));  // the conditional half
      }
      const std::vector<std::int64_t> t(static_cast<std::size_t>(n), step);
      const diffusion::ImageShape shape{n, cfg.in_channels, cfg.input_size, cfg.input_size};
      std::vector<double> noise(x.size());
      for (std::int64_t i = 0; i < n; ++i) {
        Philox rng(req.seed, RngPurpose::Sampler, static_cast<std::uint64_t>(step + 1),
                   static_cast<std::uint64_t>(req.first_index + lo + i));
        for (std::int64_t j = 0; j < per; ++j) noise[i * per + j] = rng.normal();
      }
      x = req.sampler == "ddim"
              ? diffusion::ddim_sample(sched, shape, o64, x, t, noise, 0.0, diffusion::ClipDenoised::kYes).sample
              : diffusion::p_sample(sched, shape, o64, x, t, noise, diffusion::ClipDenoised::kYes).sample;
    }
    // The new x goes from the last stage back to every stage (stage 0 needs it next).
    std::vector<float> xf(x.begin(), x.end());
    ctx.pp->broadcast(Tensor{xf.data(), DType::F32, {std::int64_t(xf.size())}, Device::Host}, ctx.layout.pp - 1);
    std::copy(xf.begin(), xf.end(), x.begin());
    if (req.after_step) req.after_step();
  }
  // Every rank gets all samples: each is owned by tp 0 of stage 0 in its dp replica.
  std::vector<float> all(static_cast<std::size_t>(total * per), 0.f);
  if (ctx.coord.tp == 0 && ctx.first_stage())
    for (std::int64_t i = 0; i < n * per; ++i) all[lo * per + i] = static_cast<float>(x[i]);
  ctx.world->all_reduce_sum(Tensor{all.data(), DType::F32, {std::int64_t(all.size())}, Device::Host});
  return all;
}

}  // namespace dit
