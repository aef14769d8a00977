// The sampling loop (see sampler.h).
#include "engine/sampler.h"

#include <algorithm>
#include <functional>

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

// What a forward pass reads and where its output goes, by rows: rows [first, first + n) enter the
// first stage as `in` (allocated from `arena`); the last stage sees the output of rows from `first`.
using PassInput = std::function<void(std::int64_t first, std::int64_t n, StageInputs& in, Arena& arena)>;
using PassOutput = std::function<void(std::int64_t first, const Tensor& out)>;

// One forward-only pass of `rows` rows through the pipeline, in equal microbatches: a sampler step.
void forward_rows(Backend& be, PipelineExecutor& executor, int pp, const DiTStage& stage, std::int64_t rows,
                  const PassInput& input, const PassOutput& output) {
  const int m = forward_microbatches(rows, pp);
  const std::int64_t mb_rows = rows / m;
  DiTPipelineHooks hooks;
  hooks.make_inputs = [&](int mb, StageInputs& in, Arena& arena) { input(mb * mb_rows, mb_rows, in, arena); };
  hooks.on_output = [&](int mb, const Tensor& o, Arena&) -> Tensor {
    output(mb * mb_rows, o);
    return {};
  };
  DiTPipelineStage pstage(be, stage, mb_rows, hooks);
  executor.run(make_forward_only(m, pp, stage.chunks()), m, pstage);
}

// The sampler's schedule: evenly respaced steps ("N", as the official sample.py) for both samplers.
diffusion::Schedule sampler_schedule(const SampleRequest& req, const DiTConfig& cfg) {
  return diffusion::create_diffusion({std::to_string(req.num_steps), cfg.learn_sigma, req.diffusion_steps});
}

// Whether step `step` is guided: guidance on, and the step's noise level in [cfg_t_min, cfg_t_max].
bool guided_step(const diffusion::Schedule& sched, int step, const SampleRequest& req) {
  const double level = static_cast<double>(sched.timestep_map[step]) / req.diffusion_steps;
  return req.cfg_scale != 1.0 && level >= req.cfg_t_min && level <= req.cfg_t_max;
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
  const auto sched = sampler_schedule(req, cfg);
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
    const bool guide = guided_step(sched, step, req);
    const std::int64_t rows = guide ? 2 * n : n;  // outside the interval: the conditional rows alone
    for (std::int64_t i = 0; i < rows; ++i) {
      std::copy(x.begin() + (i % n) * per, x.begin() + (i % n + 1) * per, xin.begin() + i * per);
      tin[i] = static_cast<float>(sched.timestep_map[step]);
    }
    forward_rows(
        be, executor, ctx.layout.pp, stage, rows,
        [&](std::int64_t f, std::int64_t k, StageInputs& in, Arena& arena) {
          upload_stage_inputs(be, cfg, k, {xin.data() + f * per, tin.data() + f, y.data() + f}, in, arena);
        },
        [&](std::int64_t f, const Tensor& o) {
          std::vector<float> v = host_copy(be, o);
          std::copy(v.begin(), v.end(), out.begin() + f * per_out);
        });

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

SamplerBytes sampler_bytes(VirtualBackend& be, ParallelContext& ctx, const DiTStage& stage, const SampleRequest& req,
                           std::int64_t batch, std::int64_t total) {
  const DiTConfig& cfg = stage.config();
  const int dp = ctx.layout.dp;
  const std::int64_t n = (batch + dp - 1) / dp;  // the largest dp share, as sample_images splits
  const bool guided = req.cfg_scale != 1.0;
  const std::int64_t max_rows = guided ? 2 * n : n;
  // The passes sample_images runs, in its order, on one executor: its arenas keep their chunks
  // from step to step, so a guided step after an unguided one adds to them.
  const auto sched = sampler_schedule(req, cfg);
  PipelineExecutor executor(*ctx.pp, be, nullptr);
  const std::size_t before = be.allocated_bytes();
  std::int64_t last_rows = -1;
  for (int step = sched.num_timesteps - 1; step >= 0 && n > 0; --step) {
    const std::int64_t rows = guided_step(sched, step, req) ? 2 * n : n;
    if (rows == last_rows) continue;  // the same pass again allocates nothing new
    last_rows = rows;
    forward_rows(
        be, executor, ctx.layout.pp, stage, rows,
        [&](std::int64_t, std::int64_t k, StageInputs& in, Arena& arena) {  // upload_stage_inputs' tensors
          in.images = arena.tensor({k, cfg.in_channels, cfg.input_size, cfg.input_size}, be.compute_dtype());
          in.t = arena.tensor({k}, DType::F32);
          in.ids = arena.tensor({k}, DType::I32);
        },
        [](std::int64_t, const Tensor&) {});
  }
  SamplerBytes b;
  b.backend = be.allocated_bytes() - before + be.workspace_bytes();
  // The host buffers of sample_images at its peak, a sampler step on the last stage: x, noise and
  // the step's result (fp64); xin, out and the copy of one microbatch's output (fp32); the model
  // output in fp64 and its guided combine; the labels and timesteps; the x broadcast (fp32).
  const double per = double(cfg.in_channels) * cfg.input_size * cfg.input_size;
  const double per_out = double(cfg.out_channels()) * cfg.input_size * cfg.input_size;
  const double rows = double(max_rows);
  const double host = n * per * 8 * 3 + rows * per * 4 + rows * per_out * 4 * 2 + rows * per_out * 8 * 2 +
                      rows * 8.0 + n * per * 4;
  // Then sample_from_weights: every rank gathers the batch's samples (fp32, all replicas), keeps a
  // copy while appending it to the request's samples, which grow to `total` images.
  b.host = static_cast<std::size_t>(host + double(batch) * per * 4 * 2 + double(total) * per * 4);
  return b;
}

}  // namespace dit
