// The sampling loop (see sampler.h).
#include "engine/sampler.h"

#include <algorithm>
#include <functional>

#include "core/error.h"

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
  executor.run(make_forward_only(m, pp, stage.chunks()), m, pstage, stage.options().placement);
}

bool in_interval(const SampleRequest& req, double level) { return level >= req.cfg_t_min && level <= req.cfg_t_max; }

// DDPM / DDIM's evenly respaced schedule ("N", as the official sample.py, for both).
diffusion::Schedule ddpm_schedule(const SampleRequest& req, bool learn_sigma) {
  return diffusion::create_diffusion({std::to_string(req.num_steps), learn_sigma, req.diffusion_steps});
}

// The time grid of SiT's fixed-step integrators: the ODE on [0, 1]; the SDE on [0, 1 - last_step_size].
std::vector<double> flow_grid(const SampleRequest& req) {
  const bool sde = req.sampler == diffusion::SamplerKind::EulerMaruyama;
  return diffusion::flow_time_grid(req.num_steps, 0.0, sde ? 1.0 - req.last_step_size : 1.0);
}

// Whether each model call of a request is guided, in the order the loops below make them (ddpm_loop:
// one per step; flow_loop: one per step, two for Heun, and the SDE's last step). Sizes the passes
// that sampler_bytes counts; keep it in step with the loops.
std::vector<bool> guided_calls(const SampleRequest& req) {
  std::vector<bool> calls;
  if (!diffusion::sampler_fits(req.sampler, diffusion::Objective::Ddpm)) {
    const std::vector<double> grid = flow_grid(req);
    auto guided = [&](double t) { return diffusion::flow_guided(t, req.cfg_t_min, req.cfg_t_max); };
    for (std::size_t k = 0; k + 1 < grid.size(); ++k) {
      calls.push_back(guided(grid[k]));
      if (req.sampler == diffusion::SamplerKind::Heun) calls.push_back(guided(grid[k + 1]));
    }
    if (req.sampler == diffusion::SamplerKind::EulerMaruyama) calls.push_back(guided(grid.back()));
    return calls;
  }
  // ddpm_schedule's timestep_map: the original timesteps its respacing keeps, ascending.
  const std::vector<int> kept = diffusion::space_timesteps(req.diffusion_steps, std::to_string(req.num_steps));
  for (auto t = kept.rbegin(); t != kept.rend(); ++t) calls.push_back(in_interval(req, double(*t) / req.diffusion_steps));
  return calls;
}
}  // namespace

diffusion::ClipDenoised clip_rule(ClipSetting setting, bool latents) {
  using diffusion::ClipDenoised;
  if (setting == ClipSetting::Auto) return latents ? ClipDenoised::kNo : ClipDenoised::kYes;
  return setting == ClipSetting::Yes ? ClipDenoised::kYes : ClipDenoised::kNo;
}

bool samples_latents(const DiTConfig& model, bool vae_named) {
  return vae_named || (model.in_channels != 1 && model.in_channels != 3);
}

SampleRequest sample_request(const SampleSection& s, std::vector<int> labels, int diffusion_steps, bool latents) {
  SampleRequest req;
  req.labels = std::move(labels);
  req.num_steps = s.num_steps;
  req.sampler = s.sampler;
  req.last_step_size = s.last_step_size;
  req.cfg_scale = s.cfg_scale;
  req.cfg_official = s.cfg_official;
  req.cfg_t_min = s.cfg_t_min;
  req.cfg_t_max = s.cfg_t_max;
  req.diffusion_steps = diffusion_steps;
  req.seed = s.seed;
  req.clip = clip_rule(s.clip_denoised, latents);
  return req;
}

namespace {

// One request's samples on this dp replica: the model evaluated through the pipeline, with
// guidance on a doubled batch, and x kept in step on every stage.
class SamplingRun {
 public:
  SamplingRun(Backend& be, ParallelContext& ctx, const DiTStage& stage, const SampleRequest& req)
      : be_(be), ctx_(ctx), stage_(stage), req_(req), cfg_(stage.config()), executor_(*ctx.pp, be, ctx.watch.get()) {
    const std::int64_t total = static_cast<std::int64_t>(req.labels.size());
    per_ = std::int64_t(cfg_.in_channels) * cfg_.input_size * cfg_.input_size;
    per_out_ = std::int64_t(cfg_.out_channels()) * cfg_.input_size * cfg_.input_size;
    const int dp = ctx.layout.dp, r = ctx.coord.dp;
    lo_ = total * r / dp;
    n_ = total * (r + 1) / dp - lo_;
    guided_ = req.cfg_scale != 1.0;
    const std::int64_t max_rows = guided_ ? 2 * n_ : n_;
    y_.resize(static_cast<std::size_t>(max_rows));
    for (std::int64_t i = 0; i < n_; ++i) {
      y_[i] = req.labels[lo_ + i];
      if (guided_) y_[n_ + i] = cfg_.num_classes;  // the null label
    }
    out_.resize(static_cast<std::size_t>(max_rows * per_out_));
    xin_.resize(static_cast<std::size_t>(max_rows * per_));
    tin_.resize(static_cast<std::size_t>(max_rows));
  }
  std::int64_t n() const { return n_; }
  std::int64_t lo() const { return lo_; }

  // Normal numbers of stream (seed, Sampler, key, sample) for this replica's samples: key 0 is the
  // initial noise, key k + 1 the noise of step k.
  std::vector<double> noise(std::uint64_t key) const {
    if (req_.given_noise) {
      std::vector<double> z = req_.given_noise(key, lo_, n_);
      DIT_CHECK(std::int64_t(z.size()) == n_ * per_, "the given noise of key ", key, " holds ", z.size(),
                " numbers, expected ", n_ * per_);
      return z;
    }
    std::vector<double> z(static_cast<std::size_t>(n_ * per_));
    for (std::int64_t i = 0; i < n_; ++i) {
      Philox rng(req_.seed, RngPurpose::Sampler, key, static_cast<std::uint64_t>(req_.first_index + lo_ + i));
      for (std::int64_t j = 0; j < per_; ++j) z[i * per_ + j] = rng.normal();
    }
    return z;
  }

  // The model output for x at model time `t_model` (n rows; guided when `guide`), complete on
  // the last stage only.
  std::vector<double> evaluate(const std::vector<double>& x, float t_model, bool guide) {
    const bool g = guided_ && guide;
    const std::int64_t rows = g ? 2 * n_ : n_;  // unguided: the conditional rows alone
    for (std::int64_t i = 0; i < rows; ++i) {
      std::copy(x.begin() + (i % n_) * per_, x.begin() + (i % n_ + 1) * per_, xin_.begin() + i * per_);
      tin_[i] = t_model;
    }
    forward_rows(
        be_, executor_, ctx_.layout.pp, stage_, rows,
        [&](std::int64_t f, std::int64_t k, StageInputs& in, Arena& arena) {
          upload_stage_inputs(be_, cfg_, k, {xin_.data() + f * per_, tin_.data() + f, y_.data() + f}, in, arena);
        },
        [&](std::int64_t f, const Tensor& o) {
          std::vector<float> v = host_copy(be_, o);
          std::copy(v.begin(), v.end(), out_.begin() + f * per_out_);
        });
    if (!last_stage()) return {};
    std::vector<double> o64(out_.begin(), out_.begin() + rows * per_out_);
    if (g) {
      const std::int64_t guided_ch = req_.cfg_official ? std::min(3, cfg_.in_channels) : cfg_.in_channels;
      o64 = diffusion::cfg_combine({rows, cfg_.out_channels(), cfg_.input_size, cfg_.input_size}, o64,
                                   req_.cfg_scale, guided_ch);
      o64.resize(static_cast<std::size_t>(n_ * per_out_));  // the conditional half
    }
    return o64;
  }

  // x as the last stage computed it, on every stage (stage 0 needs it next), rounded to fp32.
  void share(std::vector<double>& x) {
    std::vector<float> xf(x.begin(), x.end());
    ctx_.pp->broadcast(Tensor{xf.data(), DType::F32, {std::int64_t(xf.size())}, Device::Host}, output_rank());
    std::copy(xf.begin(), xf.end(), x.begin());
  }

  diffusion::ImageShape shape() const { return {n_, cfg_.in_channels, cfg_.input_size, cfg_.input_size}; }
  // The stage with the model output (the last model chunk): pp - 1, or stage 0 under ZB-V's V.
  int output_rank() const { return output_stage(ctx_.layout.pp, stage_.chunks(), stage_.options().placement); }
  bool last_stage() const { return ctx_.coord.pp == output_rank(); }

 private:
  Backend& be_;
  ParallelContext& ctx_;
  const DiTStage& stage_;
  const SampleRequest& req_;
  const DiTConfig& cfg_;
  PipelineExecutor executor_;
  std::int64_t per_ = 0, per_out_ = 0, lo_ = 0, n_ = 0;
  bool guided_ = false;
  std::vector<std::int32_t> y_;
  std::vector<float> out_, xin_, tin_;
};

// DDPM / DDIM over the evenly respaced schedule.
void ddpm_loop(SamplingRun& run, const SampleRequest& req, bool learn_sigma, std::vector<double>& x) {
  const auto sched = ddpm_schedule(req, learn_sigma);
  for (int step = sched.num_timesteps - 1; step >= 0; --step) {
    const double level = static_cast<double>(sched.timestep_map[step]) / req.diffusion_steps;
    const std::vector<double> o = run.evaluate(x, static_cast<float>(sched.timestep_map[step]), in_interval(req, level));
    if (run.last_stage()) {
      const std::vector<std::int64_t> t(static_cast<std::size_t>(run.n()), step);
      const std::vector<double> z = run.noise(static_cast<std::uint64_t>(step + 1));
      x = req.sampler == diffusion::SamplerKind::Ddim
              ? diffusion::ddim_sample(sched, run.shape(), o, x, t, z, 0.0, req.clip).sample
              : diffusion::p_sample(sched, run.shape(), o, x, t, z, req.clip).sample;
    }
    run.share(x);
    if (req.after_step) req.after_step();
  }
}

// SiT's fixed-step integrators from t = 0 (noise) to 1 (data) on linspace(t0, t1, num_steps):
// the ODE on [0, 1]; the SDE (Euler-Maruyama, diffusion "sigma") on [0, 1 - last_step_size],
// then its Mean last step. The model sees t itself; the noise level for guidance is 1 - t.
void flow_loop(SamplingRun& run, const SampleRequest& req, std::vector<double>& x) {
  using diffusion::SamplerKind;
  const bool sde = req.sampler == SamplerKind::EulerMaruyama;
  const std::vector<double> grid = flow_grid(req);
  auto velocity = [&](const std::vector<double>& at, double t) {
    return run.evaluate(at, static_cast<float>(t), diffusion::flow_guided(t, req.cfg_t_min, req.cfg_t_max));
  };
  for (std::size_t k = 0; k + 1 < grid.size(); ++k) {
    const double t = grid[k], dt = grid[k + 1] - grid[k];
    const std::vector<double> v = velocity(x, t);
    if (req.sampler == SamplerKind::Heun) {
      std::vector<double> xp = run.last_stage() ? diffusion::heun_predict(x, v, dt) : x;
      run.share(xp);
      const std::vector<double> v2 = velocity(xp, grid[k + 1]);
      if (run.last_stage()) x = diffusion::heun_correct(x, v, v2, dt);
    } else if (run.last_stage()) {
      x = sde ? diffusion::euler_maruyama_step(x, v, t, dt, run.noise(k + 1)) : diffusion::euler_step(x, v, dt);
    }
    run.share(x);
    if (req.after_step) req.after_step();
  }
  if (sde) {
    const double t1 = grid.back();
    const std::vector<double> v = velocity(x, t1);
    if (run.last_stage()) x = diffusion::sde_mean_last_step(x, v, t1, req.last_step_size);
    run.share(x);
  }
  if (req.after_step) req.after_step();  // num_steps - 1 integration steps + the end: num_steps ticks
}

}  // namespace

std::vector<float> sample_images(Backend& be, ParallelContext& ctx, const DiTStage& stage,
                                 const SampleRequest& req) {
  const DiTConfig& cfg = stage.config();
  const bool flow = !diffusion::sampler_fits(req.sampler, diffusion::Objective::Ddpm);
  DIT_CHECK(!flow || !cfg.learn_sigma, "the ", name_of(diffusion::kSamplerNames, req.sampler),
            " sampler integrates a flow model, which learns no variance, but this model learns one");
  SamplingRun run(be, ctx, stage, req);
  const std::int64_t total = static_cast<std::int64_t>(req.labels.size()), n = run.n(), lo = run.lo();
  const std::int64_t per = std::int64_t(cfg.in_channels) * cfg.input_size * cfg.input_size;
  std::vector<double> x = run.noise(0);
  if (n > 0) {
    if (flow) flow_loop(run, req, x);
    else ddpm_loop(run, req, cfg.learn_sigma, x);
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
  PipelineExecutor executor(*ctx.pp, be, nullptr);
  const std::size_t before = be.allocated_bytes();
  std::int64_t last_rows = -1;
  for (const bool guide : guided_calls(req)) {
    if (n == 0) break;
    const std::int64_t rows = guided && guide ? 2 * n : n;
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
  // the step's result (fp64, DDPM); xin, out and the copy of one microbatch's output (fp32); the model
  // output in fp64 and its guided combine; the labels and timesteps; the x broadcast (fp32).
  const double per = double(cfg.in_channels) * cfg.input_size * cfg.input_size;
  const double per_out = double(cfg.out_channels()) * cfg.input_size * cfg.input_size;
  const double rows = double(max_rows);
  // A flow step holds more fp64 copies of x: Heun's v, predictor and second velocity beside x and
  // the result; Euler-Maruyama's noise, drift and mean.
  const double copies = diffusion::sampler_fits(req.sampler, diffusion::Objective::Ddpm) ? 3 : 5;
  const double host = n * per * 8 * copies + rows * per * 4 + rows * per_out * 4 * 2 + rows * per_out * 8 * 2 +
                      rows * 8.0 + n * per * 4;
  // Then sample_from_weights: every rank gathers the batch's samples (fp32, all replicas), keeps a
  // copy while appending it to the request's samples, which grow to `total` images.
  b.host = static_cast<std::size_t>(host + double(batch) * per * 4 * 2 + double(total) * per * 4);
  return b;
}

}  // namespace dit
