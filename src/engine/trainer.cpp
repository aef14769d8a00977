// The distributed training step (see trainer.h).
#include "engine/trainer.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "core/clock.h"
#include "core/trace.h"
#include "engine/global_tensors.h"
#include "core/philox.h"
#include "diffusion/losses.h"
#include "engine/step_parts.h"

namespace dit {


Trainer::Trainer(Backend& be, ParallelContext& ctx, const DiTConfig& model, const TrainConfig& train,
                 const Dataset& data)
    : Trainer(be, ctx, TrainSetup::make(model, train, ctx.layout), data) {}

Trainer::Trainer(Backend& be, ParallelContext& ctx, const TrainSetup& setup, const Dataset& data)
    : be_(&be), ctx_(&ctx), cfg_(setup.model), train_(setup.train),
      noise_(diffusion::create_diffusion({"", setup.model.learn_sigma, setup.train.diffusion_steps})),
      scaler_(be.compute_dtype() == DType::F16 ? LossScaling::Dynamic : LossScaling::Off, setup.train.loss_scale_window,
              setup.train.loss_scale),
      spikes_(setup.train.loss_spike_z) {
  const SampleShape s = data.shape();
  DIT_CHECK(s.channels == cfg_.in_channels && s.height == cfg_.input_size && s.width == cfg_.input_size,
            "the dataset's samples are ", s.channels, "x", s.height, "x", s.width, " but the model takes ",
            cfg_.in_channels, "x", cfg_.input_size, "x", cfg_.input_size);
  DIT_CHECK(setup.layout.tp == ctx.layout.tp && setup.layout.pp == ctx.layout.pp && setup.layout.dp == ctx.layout.dp,
            "a training setup for ", setup.layout.str(), " on a rank grid of ", ctx.layout.str());
  const Layout& l = ctx.layout;
  model_ = std::make_unique<DiTStage>(be, cfg_, setup.stage_chunks(ctx.coord.pp), *ctx.tp, l.dp, train_.stage);
  // ZeRO-3 keeps a rank's shard of the parameters only: the rest is never written here.
  const FlatRange keep = train_.zero >= 3 && l.dp > 1
                             ? ZeroOptimizer::shard_range(model_->params().padded_numel(), l.dp, ctx.dp->rank())
                             : FlatRange{0, model_->params().padded_numel()};
  model_->params().initialize(train_.seed, keep.begin, keep.end);
  DIT_CHECK(train_.objective.objective != diffusion::Objective::Flow || !cfg_.learn_sigma,
            "the flow objective trains a velocity model, which learns no variance (learn_sigma is set)");
  const ZeroOptions zero{train_.zero, train_.grad_reduce,
                         static_cast<std::size_t>(train_.bucket_mib * double(1 << 20)), train_.overlap,
                         train_.offload};
  zero_ = std::make_unique<ZeroOptimizer>(be, model_->params(), ctx, zero, model_->units());
  model_->set_residency(zero_.get());
  const int holder = output_stage(l.pp, model_->chunks(), train_.stage.placement);
  parts_ = make_step_parts({&be, &ctx, &setup, model_.get(), ctx.coord.pp == holder});
  for (const auto& p : parts_) {
    if (companion_ == nullptr) companion_ = p->companion();
    recipe_weight_ *= p->recipe_weight();
  }
  batches_ = std::make_unique<BatchSource>(data, noise_, setup.batch, train_.seed, cfg_.class_dropout_prob,
                                           cfg_.num_classes, train_.objective);
  read_ahead_ = std::make_unique<ReadAhead>(*batches_, ctx.coord.dp, batches_->plan().microbatches);
  executor_ = std::make_unique<PipelineExecutor>(*ctx.pp, be, ctx.watch.get());
  const std::vector<float> table = diffusion::loss_coef_table(noise_, train_.objective.weighting);
  coefs_ = Buffer(be, table.size() * sizeof(float));
  upload(coefs_.tensor({noise_.num_timesteps, math::kNumLossCoefs}, DType::F32), table.data(), DType::F32);
  const BatchPlan& plan = batches_->plan();
  const std::size_t samples = static_cast<std::size_t>(plan.microbatches) * plan.micro_batch;
  terms_ = Buffer(be, samples * 3 * sizeof(float));
  // What one step uploads per microbatch: x0, t (schedule and model timesteps) and labels; the
  // backend sizes its upload ring for it once, so nothing is allocated mid-step.
  const std::size_t per_sample = std::size_t(cfg_.in_channels) * cfg_.input_size * cfg_.input_size * 4 + 3 * 4;
  be.reserve_uploads(per_sample * plan.micro_batch * plan.microbatches);
}

StageState Trainer::state() {
  zero_->settle();
  Backend& be = *be_;
  const Optimizer& o = zero_->shard();
  StageState s;
  s.model = gather_shards(be, *zero_, o.master(), *ctx_);
  s.exp_avg = gather_shards(be, *zero_, o.exp_avg(), *ctx_);
  s.exp_avg_sq = gather_shards(be, *zero_, o.exp_avg_sq(), *ctx_);
  s.ema = gather_shards(be, *zero_, o.ema(), *ctx_);
  return s;
}

StageState Trainer::gather_state(const std::function<FlatRange(int)>& want_of) {
  const Optimizer& o = zero_->shard();
  StageState s;
  s.begin = want_of(ctx_->coord.dp).begin;
  s.model = gather_range(*be_, *zero_, o.master(), *ctx_, want_of);
  s.exp_avg = gather_range(*be_, *zero_, o.exp_avg(), *ctx_, want_of);
  s.exp_avg_sq = gather_range(*be_, *zero_, o.exp_avg_sq(), *ctx_, want_of);
  s.ema = gather_range(*be_, *zero_, o.ema(), *ctx_, want_of);
  return s;
}

StateView Trainer::checkpoint_view(StageState& owned) {
  zero_->settle();
  const Optimizer& o = zero_->shard();
  const Tensor kinds[4] = {o.master(), o.ema(), o.exp_avg(), o.exp_avg_sq()};  // ckpt::kKinds' order
  const bool on_host = std::all_of(std::begin(kinds), std::end(kinds), [](const Tensor& t) {
    return t.device == Device::Host && t.dtype == DType::F32;
  });
  const ParamSet& ps = model_->params();
  const int dp = ctx_->layout.dp;
  if (!on_host) {  // all of the rank's tensors, gathered
    owned = gather_state([&](int r) { return checkpoint_range(ps, dp, r); });
    return owned.view();
  }
  // The shard from the optimizer's own buffers; past it, the values of the tensors that start in it
  // and run on (at most the largest tensor's), gathered from the next ranks (collective over dp).
  StateView v;
  v.begin = zero_->shard_begin();
  for (int k = 0; k < 4; ++k) {
    v.kinds[k] = static_cast<const float*>(kinds[k].data);
    v.sizes[k] = zero_->shard_size();
  }
  if (dp == 1) return v;
  owned = gather_state([&](int r) {
    const std::int64_t end = ZeroOptimizer::shard_range(ps.padded_numel(), dp, r).end;
    return FlatRange{end, std::max(end, checkpoint_range(ps, dp, r).end)};
  });
  if (!owned.model.empty()) v.tail = &owned;
  return v;
}

void Trainer::restore(const StageState& s, std::int64_t steps_done, const LossScaleState& scaling) {
  DIT_CHECK(scaling.skipped_steps <= steps_done, "restore: ", scaling.skipped_steps,
            " skipped steps out of ", steps_done);
  scaler_.restore(scaling);
  zero_->settle();  // no gather of a step before may land on the restored parameters
  Backend& be = *be_;
  const ParamSet& ps = model_->params();
  const FlatRange need = restore_range(), have = s.range();
  const std::int64_t b = need.begin, len = need.size();
  DIT_CHECK(s.ema.size() == s.model.size() && s.exp_avg.size() == s.model.size() &&
                s.exp_avg_sq.size() == s.model.size() && have.begin <= need.begin && need.end <= have.end,
            "restore: a state of elements ", have.begin, " to ", have.end, " for the shard of elements ", need.begin,
            " to ", need.end);
  auto host = [&](const std::vector<float>& v) {
    return Tensor{const_cast<float*>(v.data()) + (b - s.begin), DType::F32, {len}, Device::Host};
  };
  be.copy(ps.flat_values().rows(b, len), host(s.model));
  Optimizer& o = zero_->shard();
  if (o.master().data != o.params().data) be.copy(o.master(), host(s.model));
  be.copy(o.exp_avg(), host(s.exp_avg));
  be.copy(o.exp_avg_sq(), host(s.exp_avg_sq));
  be.copy(o.ema(), host(s.ema));
  zero_->gather_values();  // levels 1, 2: the other shards' parameters, as their owners hold them
  step_ = steps_done;
}

MemoryAccount Trainer::memory() const {
  const Optimizer& o = zero_->shard();
  MemoryAccount m;
  m.params = zero_->param_bytes();
  m.grads = zero_->grad_bytes();
  if (zero_->offloaded()) {
    m.host = zero_->host_bytes();
  } else {
    m.master = o.master().data != o.params().data ? o.master().bytes() : 0;
    m.exp_avg = o.exp_avg().bytes();
    m.exp_avg_sq = o.exp_avg_sq().bytes();
    m.ema = o.ema().bytes();
  }
  m.activations = executor_->peak_activation_bytes();
  m.messages = executor_->peak_message_bytes();
  m.workspace = workspace_peak_ + be_->workspace_bytes();  // the stage's scratch + the backend's (attention)
  for (const auto& p : parts_) m.parts += p->bytes();
  return m;
}

const Microbatch& Trainer::microbatch(int mb) {
  auto it = cache_.find(mb);
  if (it == cache_.end()) {
    const double t0 = now_s();
    const auto span = trace::span_if_on("data", [mb] { return "microbatch " + std::to_string(mb); });
    it = cache_.emplace(mb, read_ahead_->take(step_, mb)).first;
    data_wait_s_ += now_s() - t0;
  }
  return it->second;
}

const Trainer::DeviceBatch& Trainer::device_batch(int mb, Arena& arena) {
  auto it = device_cache_.find(mb);
  if (it != device_cache_.end()) return it->second;
  const Microbatch& b = microbatch(mb);
  const std::int64_t n = b.n;
  DeviceBatch d;
  d.x0 = arena.tensor({n, cfg_.in_channels, cfg_.input_size, cfg_.input_size}, DType::F32);
  upload(d.x0, b.x_start.data(), DType::F32);
  d.t = arena.tensor({n}, DType::I32);
  if (b.time.empty()) {  // ddpm: the schedule index into the step's table
    upload(d.t, b.t.data(), DType::I32);
    d.coefs = coefs_.tensor({noise_.num_timesteps, math::kNumLossCoefs}, DType::F32);
  } else {  // flow: sample i reads its own row (t, 1 - t)
    std::vector<std::int32_t> rows(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) rows[i] = static_cast<std::int32_t>(i);
    upload(d.t, rows.data(), DType::I32);
    const std::vector<float> path = diffusion::flow_coef_rows(b.time);
    d.coefs = arena.tensor({n, math::kNumLossCoefs}, DType::F32);
    upload(d.coefs, path.data(), DType::F32);
  }
  d.noise = arena.tensor(d.x0.shape, DType::F32);
  be_->philox_normal(train_.seed, static_cast<std::uint32_t>(RngPurpose::Noise),
                     static_cast<std::uint64_t>(step_), static_cast<std::uint64_t>(b.first),
                     d.noise.view({n, d.x0.numel() / n}));
  return device_cache_.emplace(mb, d).first->second;
}

// What the model's timestep embedding is fed: the original timestep index (ddpm), or t in [0, 1]
// itself (flow, as SiT calls its model).
std::vector<float> Trainer::model_times(const Microbatch& b) const {
  if (!b.time.empty()) return {b.time.begin(), b.time.end()};
  const std::vector<std::int64_t> t64(b.t.begin(), b.t.end());
  const auto model_t = noise_.model_timesteps(t64);
  return {model_t.begin(), model_t.end()};
}

// A test's fault point: DIT_FAULT_NONFINITE_GRAD=FIRST-LAST (1-based steps) puts a NaN into the
// first gradient of world rank 0 at those steps, after the backward: a non-finite gradient under a
// finite loss, which the step must skip.
void Trainer::inject_nonfinite_gradient(std::int64_t step) {
  const char* spec = std::getenv("DIT_FAULT_NONFINITE_GRAD");
  long long first = 0, last = 0;
  if (spec == nullptr || ctx_->world_rank != 0 || std::sscanf(spec, "%lld-%lld", &first, &last) != 2) return;
  if (step < first || step > last) return;
  const float nan = std::nanf("");
  upload(zero_->first_gradient(), &nan, DType::F32);
}

// A fault for the layout tuner's test: DIT_FAULT_SLOW_LAYOUT="TPxPP:SECONDS" makes every step at that
// tp and pp take SECONDS longer on every rank (as a slow link or a throttled device would).
void Trainer::inject_slow_layout() const {
  const char* spec = std::getenv("DIT_FAULT_SLOW_LAYOUT");
  int tp = 0, pp = 0;
  double seconds = 0;
  if (spec == nullptr || std::sscanf(spec, "%dx%d:%lf", &tp, &pp, &seconds) != 3) return;
  if (tp != ctx_->layout.tp || pp != ctx_->layout.pp || !(seconds > 0 && seconds < 60)) return;
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
}

void Trainer::upload(const Tensor& dst, const void* host, DType host_dtype) {
  be_->copy(dst, Tensor{const_cast<void*>(host), host_dtype, dst.shape, Device::Host});
}

// Every rank learns the step's loss: the last stage's tp rank 0 of each dp replica contributes the
// recipe's terms from one download of the step's per-sample terms, each part its own (by name).
void Trainer::gather_losses(const Tensor& terms, const StepView& view, StepStats& st) {
  std::vector<double> sums(3, 0.0);  // loss, mse, second: summed over this rank's samples
  const int holder = output_stage(ctx_->layout.pp, model_->chunks(), train_.stage.placement);
  if (ctx_->coord.pp == holder && ctx_->tp->rank() == 0) {
    std::vector<float> host(static_cast<std::size_t>(terms.numel()));
    be_->copy(Tensor{host.data(), DType::F32, terms.shape, Device::Host}, terms);
    for (std::size_t i = 0; i < host.size(); ++i) sums[i % 3] += host[i];
  }
  std::vector<std::size_t> first;  // each part's first sum
  for (const auto& p : parts_) {
    first.push_back(sums.size());
    sums.resize(sums.size() + p->loss_names().size(), 0.0);
    p->local_sums(sums.data() + first.back());
  }
  double all = 0;
  for (double v : sums) all += v;
  const bool bad = !std::isfinite(all);
  const double bad_rank = ctx_->world->all_reduce_max(bad ? -double(ctx_->world_rank) : -1e9);
  st.nonfinite_rank = bad_rank > -1e9 ? static_cast<int>(-bad_rank) : -1;
  ctx_->world->all_reduce_sum(sums.data(), static_cast<int>(sums.size()));
  const double n = double(batches_->plan().global_batch);
  st.recipe = sums[0] / n;
  st.mse = sums[1] / n;
  st.second = sums[2] / n;
  st.recipe_weight = recipe_weight_;
  st.loss = st.recipe;
  if (parts_.empty()) return;
  st.loss = recipe_weight_ * st.recipe;
  for (std::size_t i = 0; i < parts_.size(); ++i)
    for (LossTerm& t : parts_[i]->terms(sums.data() + first[i], n, view)) {
      st.loss += t.weight * t.value;
      st.terms.push_back(std::move(t));
    }
}

void Trainer::output_loss(int mb, const Tensor& out, const Tensor& dout, float grad_scale, const Tensor& terms,
                          Arena& arena) {
  const DeviceBatch& d = device_batch(mb, arena);
  const math::LossKind kind = diffusion::loss_kind(train_.objective, cfg_.learn_sigma);
  const std::int64_t n = batches_->plan().micro_batch;
  const float recipe_scale = parts_.empty() ? grad_scale : grad_scale * static_cast<float>(recipe_weight_);
  be_->sample_loss(diffusion_loss_fn(kind, d.x0, recipe_scale), {.a = out,
                                                                  .grad = dout,
                                                                  .x0 = d.x0,
                                                                  .noise = d.noise,
                                                                  .t = d.t,
                                                                  .coefs = d.coefs,
                                                                  .terms = terms.rows(mb * n, n)});
  for (const auto& p : parts_) p->add_output_loss({mb, out, dout, d.x0, d.noise, d.t, d.coefs, kind, grad_scale});
}

DiTPipelineHooks Trainer::step_hooks(const Tensor& terms, const StepView& view) {
  Backend& be = *be_;
  const std::int64_t n = view.plan->micro_batch;
  const DType dt = be.compute_dtype();
  const float grad_scale = view.grad_scale;
  DiTPipelineHooks hooks;
  hooks.make_inputs = [this, &be, n, dt](int mb, StageInputs& in, Arena& arena) {
    const Microbatch& b = microbatch(mb);
    const DeviceBatch& d = device_batch(mb, arena);
    in.images = arena.tensor(d.x0.shape, dt);
    be.q_sample(d.x0, d.noise, d.t, d.coefs, in.images);
    const std::vector<float> t = model_times(b);
    upload_stage_inputs(be, cfg_, n, {nullptr, t.data(), b.y.data()}, in, arena);
  };
  hooks.on_output = [this, terms, grad_scale, dt](int mb, const Tensor& out, Arena& arena) {
    Tensor dout = arena.tensor(out.shape, dt);
    output_loss(mb, out, dout, grad_scale, terms, arena);
    return dout;
  };
  for (const auto& p : parts_) p->begin_step(view, hooks);
  return hooks;
}

int Trainer::train_to(std::int64_t steps, const AfterStep& after) {
  for (std::int64_t done = step_ + 1; done <= steps; ++done)
    if (const int rc = after(done, step())) return rc;
  return 0;
}

StepStats Trainer::step() {
  Backend& be = *be_;
  trace::set_step(step_ + 1);
  const auto step_span = trace::span_if_on("step", [&] { return "step " + std::to_string(step_ + 1); });
  const double t_start = now_s();
  inject_slow_layout();
  const BatchPlan& plan = batches_->plan();
  const std::int64_t n = plan.micro_batch;
  const std::uint64_t tp0 = ctx_->tp->stats().bytes, pp0 = ctx_->pp->stats().bytes,
                      dp0 = ctx_->dp->stats().bytes, syncs0 = be.host_syncs();
  // The seconds inside each kind of collective at the step's start, after the pipeline, at its end.
  const auto comm_s = [&] {
    return std::array<double, 3>{ctx_->tp->stats().seconds, ctx_->dp->stats().seconds, ctx_->world->stats().seconds};
  };
  const std::array<double, 3> c0 = comm_s();
  data_wait_s_ = 0;
  // The watchdog names the step in its message; this process's first step builds plans and
  // touches all memory, so its waits get the slow-phase allowance.
  const bool first = !stepped_;
  stepped_ = true;
  WatchPhase phase(ctx_->watch.get(), first ? "the first step" : "training", first ? CommWatch::kSlowPhaseFactor : 1.0);
  ctx_->watch->step = step_ + 1;
  StepStats st;
  st.step = step_;
  cache_.clear();
  device_cache_.clear();
  zero_->zero_grads();
  const Tensor terms = terms_.tensor({plan.microbatches * n, 3}, DType::F32);

  // d(mean over a microbatch) scaled to the step's mean over its microbatches (and, through the
  // ZeRO reduction, over dp); under fp16 loss scaling the backward carries d(S x loss).
  const StepView view{step_, train_.steps, &plan, static_cast<float>(scaler_.scale() / plan.microbatches)};
  const DiTPipelineHooks hooks = step_hooks(terms, view);
  DiTPipelineStage stage(be, *model_, n, hooks, companion_);
  stage.expect_microbatches(plan.microbatches);
  const PipelineTiming timing = executor_->run(
      make_pipeline_schedule(train_.schedule, ctx_->layout.pp, ctx_->coord.pp, plan.microbatches,
                             train_.virtual_stages),
      plan.microbatches, stage, train_.stage.placement);

  const double t_opt = now_s();
  const std::array<double, 3> c1 = comm_s();
  auto update_span = trace::span_if_on("optimizer", [] { return std::string("update"); });
  LrConfig lc{train_.adamw.lr, train_.warmup, train_.lr_schedule, train_.min_lr, train_.steps};
  st.lr = lr_at(lc, step_);
  // AdamW counts the updates it applied; EMA warmup counts steps, as the official loop does.
  st.loss_scale = scaler_.scale();
  const std::int64_t adam_step = step_ + 1 - scaler_.state().skipped_steps;
  inject_nonfinite_gradient(step_ + 1);
  gather_losses(terms, view, st);  // every rank knows whether the loss was finite before the update
  // The same loss on every rank, so the same verdict: a spike is logged, or skipped as a non-finite loss.
  st.spike = spikes_.check(step_ + 1, st.loss);
  st.spike_skipped = !st.spike.empty() && train_.skip_loss_spikes;
  // A step whose loss or gradient norm is not finite is skipped at every precision (nothing
  // non-finite reaches the weights, the moments or the EMA), and counted in a row, one rule for
  // both (the caller stops at train.max_nonfinite_steps); on finite values Skip and Apply are the same.
  const ZeroOptimizer::Result r =
      zero_->step(train_.adamw, st.lr, adam_step, train_.grad_clip,
                  ema_decay_at(train_.ema_decay, train_.ema_warmup, step_), st.loss_scale,
                  st.nonfinite_rank >= 0 || st.spike_skipped ? ZeroOptimizer::NonFinite::Discard
                                                             : ZeroOptimizer::NonFinite::Skip);
  st.grad_norm = r.grad_norm;
  st.skipped = !r.applied;
  st.nonfinite_at_scale_one = scaler_.enabled() && st.skipped && st.loss_scale <= 1.0;
  scaler_.update(r.applied);
  st.nonfinite_in_row = scaler_.state().nonfinite_in_row;
  nonfinite_loss_in_row_ = st.nonfinite_rank >= 0 ? nonfinite_loss_in_row_ + 1 : 0;
  st.nonfinite_loss_in_row = nonfinite_loss_in_row_;
  if (r.applied)
    for (const auto& p : parts_) p->after_update(adam_step, st.loss_scale);

  StepAccounting& a = st.acct;
  a.tp_bytes = ctx_->tp->stats().bytes - tp0;
  a.pp_bytes = ctx_->pp->stats().bytes - pp0;
  a.dp_bytes = ctx_->dp->stats().bytes - dp0;
  a.compute_s = timing.compute_s;
  a.pp_wait_s = timing.wait_s;
  a.op_f_s = timing.mean_forward_s(), a.op_b_s = timing.mean_backward_s(), a.op_w_s = timing.mean_weight_s();
  update_span.reset();
  const double t_end = now_s();
  const std::array<double, 3> c2 = comm_s();
  a.optimizer_s = t_end - t_opt;
  a.step_s = t_end - t_start;
  // The collectives' time is taken out of the phase it fell in: the pipeline's stage calls (tp, the
  // dp reduction overlapped with the backward) or the update (dp's reduce and gather, the loss gather).
  StepSplit& sp = a.split;
  sp.tp = c2[0] - c0[0];
  sp.dp = c2[1] - c0[1];
  sp.data = data_wait_s_;
  sp.idle = timing.wait_s + (c2[2] - c0[2]);
  sp.optimizer = std::max(0.0, a.optimizer_s - (c2[0] - c1[0]) - (c2[1] - c1[1]) - (c2[2] - c1[2]));
  sp.compute = std::max(0.0, a.step_s - sp.tp - sp.dp - sp.data - sp.idle - sp.optimizer);
  a.measured_bubble = timing.wait_s / std::max(1e-12, timing.wait_s + timing.compute_s);
  a.theoretical_bubble = theoretical_bubble(train_.schedule, ctx_->layout.pp, plan.microbatches, train_.virtual_stages);
  workspace_peak_ = std::max(workspace_peak_, stage.scratch_peak_bytes());
  a.activation_bytes = executor_->peak_activation_bytes() + stage.scratch_peak_bytes();
  a.host_syncs = be.host_syncs() - syncs0;
  ++step_;
  return st;
}

}  // namespace dit
