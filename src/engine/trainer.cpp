// The distributed training step (see trainer.h).
#include "engine/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/clock.h"
#include "engine/global_tensors.h"
#include "core/philox.h"
#include "diffusion/losses.h"

namespace dit {


Trainer::Trainer(Backend& be, ParallelContext& ctx, const DiTConfig& model, const TrainConfig& train,
                 const Dataset& data)
    : Trainer(be, ctx, TrainSetup::make(model, train, ctx.layout), data) {}

Trainer::Trainer(Backend& be, ParallelContext& ctx, const TrainSetup& setup, const Dataset& data)
    : be_(&be), ctx_(&ctx), cfg_(setup.model), train_(setup.train),
      schedule_(diffusion::create_diffusion({"", setup.model.learn_sigma, setup.train.diffusion_steps})),
      scaler_(be.compute_dtype() == DType::F16 ? LossScaling::Dynamic : LossScaling::Off, setup.train.loss_scale_window,
              setup.train.loss_scale) {
  const SampleShape s = data.shape();
  DIT_CHECK(s.channels == cfg_.in_channels && s.height == cfg_.input_size && s.width == cfg_.input_size,
            "the dataset's samples are ", s.channels, "x", s.height, "x", s.width, " but the model takes ",
            cfg_.in_channels, "x", cfg_.input_size, "x", cfg_.input_size);
  DIT_CHECK(setup.layout.tp == ctx.layout.tp && setup.layout.pp == ctx.layout.pp && setup.layout.dp == ctx.layout.dp,
            "a training setup for ", setup.layout.str(), " on a rank grid of ", ctx.layout.str());
  const Layout& l = ctx.layout;
  model_ = std::make_unique<DiTStage>(be, cfg_, setup.stage_chunks(ctx.coord.pp), *ctx.tp, l.dp, train_.stage);
  model_->params().initialize(train_.seed);
  if (train_.distill.enabled()) {
    teacher_ = std::make_unique<TeacherStage>(be, train_.distill.teacher_model, setup.teacher_stage_chunks(ctx.coord.pp),
                                              *ctx.tp, *model_, train_.distill);
    if (be.device() != Device::Virtual) teacher_->load(train_.distill.teacher);  // the planner's buffers hold no values
  }
  zero_ = std::make_unique<ZeroOptimizer>(be, model_->params(), ctx, train_.grad_reduce);
  if (train_.lora.enabled()) {
    const int r = train_.lora.rank;
    lora_ = std::make_unique<ParamSet>(be, declare_lora(model_->params().specs(), r), ctx.tp->size(),
                                       ctx.tp->rank(), l.dp);
    lora_->initialize(train_.seed);
    lora_zero_ = std::make_unique<ZeroOptimizer>(be, *lora_, ctx, train_.grad_reduce);
    // The most rows a block linear sees: a microbatch's tokens, all of them under sequence parallelism.
    const std::int64_t rows = std::int64_t(setup.batch.micro_batch) * cfg_.num_patches();
    const std::size_t bytes = static_cast<std::size_t>(rows * r) * dtype_size(be.compute_dtype());
    lora_t_ = Buffer(be, bytes);
    lora_u_ = Buffer(be, bytes);
    model_->attach_lora(*lora_, train_.lora.scale(), lora_t_.tensor({rows, r}, be.compute_dtype()),
                        lora_u_.tensor({rows, r}, be.compute_dtype()));
  }
  DIT_CHECK(train_.objective.objective != diffusion::Objective::Flow || !cfg_.learn_sigma,
            "diffusion.objective = \"flow\" needs model.learn_sigma = false (a velocity model learns no variance)");
  batches_ = std::make_unique<BatchSource>(data, schedule_, setup.batch, train_.seed, cfg_.class_dropout_prob,
                                           cfg_.num_classes, train_.objective);
  executor_ = std::make_unique<PipelineExecutor>(*ctx.pp, be, ctx.watch.get());
  const std::vector<float> table = diffusion::loss_coef_table(schedule_, train_.objective.weighting);
  coefs_ = Buffer(be, table.size() * sizeof(float));
  upload(coefs_.tensor({schedule_.num_timesteps, math::kNumLossCoefs}, DType::F32), table.data(), DType::F32);
  const BatchPlan& plan = batches_->plan();
  const std::size_t samples = static_cast<std::size_t>(plan.microbatches) * plan.micro_batch;
  terms_ = Buffer(be, samples * 3 * sizeof(float));
  if (train_.gates.enabled()) {
    gates_ = std::make_unique<LayerGates>(train_.gates, train_.seed);
    gate_grads_ = Buffer(be, samples * static_cast<std::size_t>(cfg_.depth) * sizeof(float));
  }
  if (teacher_) {
    kd_terms_ = Buffer(be, samples * 2 * sizeof(float));
    feature_terms_ = Buffer(be, samples * sizeof(float));
  }
  // What one step uploads per microbatch: x0, t (schedule and model timesteps) and labels; the
  // backend sizes its upload ring for it once, so nothing is allocated mid-step.
  const std::size_t per_sample = std::size_t(cfg_.in_channels) * cfg_.input_size * cfg_.input_size * 4 + 3 * 4;
  be.reserve_uploads(per_sample * plan.micro_batch * plan.microbatches);
}

StageState Trainer::state() {
  Backend& be = *be_;
  const Optimizer& o = zero_->shard();
  StageState s;
  s.model = gather_shards(be, *zero_, o.master(), *ctx_);
  s.exp_avg = gather_shards(be, *zero_, o.exp_avg(), *ctx_);
  s.exp_avg_sq = gather_shards(be, *zero_, o.exp_avg_sq(), *ctx_);
  s.ema = gather_shards(be, *zero_, o.ema(), *ctx_);
  return s;
}

void Trainer::restore(const StageState& s, std::int64_t steps_done, const LossScaleState& scaling) {
  DIT_CHECK(scaling.skipped_steps <= steps_done, "restore: ", scaling.skipped_steps,
            " skipped steps out of ", steps_done);
  scaler_.restore(scaling);
  Backend& be = *be_;
  const ParamSet& ps = model_->params();
  const std::int64_t n = ps.padded_numel(), b = zero_->shard_begin(), len = zero_->shard_size();
  DIT_CHECK(static_cast<std::int64_t>(s.model.size()) == n && s.ema.size() == s.model.size() &&
                s.exp_avg.size() == s.model.size() && s.exp_avg_sq.size() == s.model.size(),
            "restore: a state of ", s.model.size(), " values for a stage of ", n);
  auto host = [](const std::vector<float>& v, std::int64_t off, std::int64_t count) {
    return Tensor{const_cast<float*>(v.data()) + off, DType::F32, {count}, Device::Host};
  };
  be.copy(ps.flat_values(), host(s.model, 0, n));
  Optimizer& o = zero_->shard();
  if (o.master().data != o.params().data) be.copy(o.master(), host(s.model, b, len));
  be.copy(o.exp_avg(), host(s.exp_avg, b, len));
  be.copy(o.exp_avg_sq(), host(s.exp_avg_sq, b, len));
  be.copy(o.ema(), host(s.ema, b, len));
  step_ = steps_done;
}

MemoryAccount Trainer::memory() const {
  const ParamSet& ps = model_->params();
  const Optimizer& o = zero_->shard();
  MemoryAccount m;
  m.params = ps.flat_values().bytes();
  m.grads = ps.flat_grads().bytes() + zero_->shard_grad_bytes();
  m.master = o.master().data != o.params().data ? o.master().bytes() : 0;
  m.exp_avg = o.exp_avg().bytes();
  m.exp_avg_sq = o.exp_avg_sq().bytes();
  m.ema = o.ema().bytes();
  m.activations = executor_->peak_activation_bytes();
  m.messages = executor_->peak_message_bytes();
  m.workspace = workspace_peak_ + be_->workspace_bytes();  // the stage's scratch + the backend's (attention)
  m.teacher = teacher_ ? teacher_->bytes() : 0;
  return m;
}

const Microbatch& Trainer::microbatch(int mb) {
  auto it = cache_.find(mb);
  if (it == cache_.end()) it = cache_.emplace(mb, batches_->get(step_, ctx_->coord.dp, mb)).first;
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
    d.coefs = coefs_.tensor({schedule_.num_timesteps, math::kNumLossCoefs}, DType::F32);
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
  const auto model_t = schedule_.model_timesteps(t64);
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
  upload(model_->params().flat_grads().rows(0, 1), &nan, DType::F32);
}

void Trainer::upload(const Tensor& dst, const void* host, DType host_dtype) {
  be_->copy(dst, Tensor{const_cast<void*>(host), host_dtype, dst.shape, Device::Host});
}

// Every rank learns the step's loss: the last stage's tp rank 0 of each dp replica contributes,
// from one download of the step's per-sample terms (distillation: and every stage's tp rank 0 its
// feature losses).
void Trainer::gather_losses(const Tensor& terms, StepStats& st) {
  double sums[6] = {0, 0, 0, 0, 0, 0};  // loss, mse, vb; kd mse, kd vb, feature: summed over this rank's samples
  const int holder = output_stage(ctx_->layout.pp, model_->chunks(), train_.stage.placement);
  const auto add = [&](const Tensor& t, int first, int width) {
    std::vector<float> host(static_cast<std::size_t>(t.numel()));
    be_->copy(Tensor{host.data(), DType::F32, t.shape, Device::Host}, t);
    for (std::size_t i = 0; i < host.size(); ++i) sums[first + static_cast<int>(i) % width] += host[i];
  };
  const std::int64_t samples = terms.dim(0);
  if (ctx_->coord.pp == holder && ctx_->tp->rank() == 0) {
    add(terms, 0, 3);
    if (teacher_) add(kd_terms_.tensor({samples, 2}, DType::F32), 3, 2);
  }
  if (teacher_ && !train_.distill.pairs.empty() && ctx_->tp->rank() == 0)
    add(feature_terms_.tensor({samples}, DType::F32), 5, 1);
  double all = 0;
  for (double v : sums) all += v;
  const bool bad = !std::isfinite(all);
  const double bad_rank = ctx_->world->all_reduce_max(bad ? -double(ctx_->world_rank) : -1e9);
  st.nonfinite_rank = bad_rank > -1e9 ? static_cast<int>(-bad_rank) : -1;
  ctx_->world->all_reduce_sum(sums, 6);
  const double n = double(batches_->plan().global_batch);
  st.loss = sums[0] / n;
  st.mse = sums[1] / n;
  st.vb = sums[2] / n;
  if (!teacher_) return;
  const DistillSettings& d = train_.distill;
  st.distilled = true;
  st.target = st.loss;
  st.kd = (sums[3] + sums[4]) / n;
  st.feature = d.pairs.empty() ? 0.0 : sums[5] / n / static_cast<double>(d.pairs.size());
  st.feature_weight = d.feature_weight_at(step_, train_.steps);
  st.loss = d.output_weight * st.kd + d.target_weight * st.target + st.feature_weight * st.feature;
}

void Trainer::output_loss(int mb, const Tensor& out, const Tensor& dout, float seed, const Tensor& terms,
                          Arena& arena) {
  const DeviceBatch& d = device_batch(mb, arena);
  const math::LossKind kind = diffusion::loss_kind(train_.objective, cfg_.learn_sigma);
  const std::int64_t n = batches_->plan().micro_batch;
  if (!teacher_) {
    be_->diffusion_loss(out, d.x0, d.noise, d.t, d.coefs, kind, seed, dout, terms.rows(mb * n, n));
    return;
  }
  const DistillSettings& ds = train_.distill;
  be_->diffusion_loss(out, d.x0, d.noise, d.t, d.coefs, kind, seed * static_cast<float>(ds.target_weight), dout,
                      terms.rows(mb * n, n));
  const auto t = teacher_out_.find(mb);
  DIT_CHECK(t != teacher_out_.end(), "distillation: no teacher output for microbatch ", mb);
  const Tensor kd = kd_terms_.tensor({terms.dim(0), 2}, DType::F32);
  be_->distill_output_loss(out, t->second, d.x0, d.noise, d.t, d.coefs, kind,
                           seed * static_cast<float>(ds.output_weight), dout, kd.rows(mb * n, n));
  teacher_out_.erase(t);
}

DiTPipelineHooks Trainer::step_hooks(const Tensor& terms, float seed) {
  Backend& be = *be_;
  const BatchPlan& plan = batches_->plan();
  const std::int64_t n = plan.micro_batch;
  const DType dt = be.compute_dtype();
  DiTPipelineHooks hooks;
  hooks.make_inputs = [this, &be, n, dt](int mb, StageInputs& in, Arena& arena) {
    const Microbatch& b = microbatch(mb);
    const DeviceBatch& d = device_batch(mb, arena);
    in.images = arena.tensor(d.x0.shape, dt);
    be.q_sample(d.x0, d.noise, d.t, d.coefs, in.images);
    const std::vector<float> t = model_times(b);
    upload_stage_inputs(be, cfg_, n, {nullptr, t.data(), b.y.data()}, in, arena);
  };
  hooks.on_output = [this, terms, seed, dt](int mb, const Tensor& out, Arena& arena) {
    Tensor dout = arena.tensor(out.shape, dt);
    output_loss(mb, out, dout, seed, terms, arena);
    return dout;
  };
  if (gates_) {
    gates_->begin_step(step_, train_.steps);
    be.fill(gate_grads_.tensor({static_cast<std::int64_t>(cfg_.depth) * plan.microbatches * n}, DType::F32), 0.f);
    hooks.block_gates = [this](int mb, int chunk) { return block_gates(mb, chunk); };
  }
  if (teacher_) {  // the teacher's outputs wait for their microbatch's loss; its feature losses add up per step
    const DistillSettings& ds = train_.distill;
    const Tensor features = feature_terms_.tensor({plan.microbatches * n}, DType::F32);
    be.fill(features, 0.f);
    const double pairs = std::max<std::size_t>(ds.pairs.size(), 1);
    teacher_->begin_step(static_cast<float>(seed * ds.feature_weight_at(step_, train_.steps) / pairs), features);
    hooks.on_companion_output = [this](int mb, const Tensor& t) { teacher_out_[mb] = t; };
  }
  return hooks;
}

std::vector<BlockGate> Trainer::block_gates(int mb, int chunk) {
  const BatchPlan& plan = batches_->plan();
  const std::int64_t n = plan.micro_batch;
  gates_->sample(mb, plan.first_position(step_, ctx_->coord.dp, mb), n);
  const Tensor grads = gate_grads_.tensor({static_cast<std::int64_t>(cfg_.depth) * plan.microbatches, n}, DType::F32);
  std::vector<BlockGate> out;
  const StageLayout& l = model_->layout(chunk);
  for (int b = l.first_block; b < l.end_block; ++b)
    out.push_back({gates_->mask(mb, b), grads.rows(std::int64_t(b) * plan.microbatches + mb, 1).view({n})});
  return out;
}

// dL/dm of this rank's blocks and samples, in the backward's scale (the loss scale, and the mean
// over this dp replica's batch): one download; each tp group adds its share once (every tp rank
// holds all tokens' sum without sequence parallelism, a part of it with).
void Trainer::update_gates(double loss_scale) {
  const BatchPlan& plan = batches_->plan();
  const std::int64_t n = plan.micro_batch, rows = std::int64_t(cfg_.depth) * plan.microbatches;
  std::vector<float> dm(static_cast<std::size_t>(rows * n));
  be_->copy(Tensor{dm.data(), DType::F32, {rows, n}, Device::Host}, gate_grads_.tensor({rows, n}, DType::F32));
  const bool counts = train_.stage.sequence_parallel || ctx_->tp->rank() == 0;
  std::vector<float> block_major(static_cast<std::size_t>(cfg_.depth * n));
  for (int mb = 0; mb < plan.microbatches; ++mb) {
    for (int b = 0; b < cfg_.depth; ++b)
      std::copy_n(dm.data() + (std::int64_t(b) * plan.microbatches + mb) * n, n, block_major.data() + b * n);
    gates_->backward(mb, block_major.data(), counts ? 1.0 : 0.0);
  }
  gates_->update(*ctx_->world, loss_scale * plan.dp);
}

void Trainer::update_lora(std::int64_t adam_step, double loss_scale) {
  if (ctx_->tp->size() > 1)
    for (std::size_t i = 0; i < lora_->size(); ++i)
      if (lora_grad_is_tp_partial(lora_->specs()[i])) ctx_->tp->all_reduce_sum(lora_->grad(static_cast<int>(i)));
  AdamWConfig adamw = train_.adamw;
  adamw.lr = train_.lora.lr;
  adamw.weight_decay = 0;
  lora_zero_->step(adamw, train_.lora.lr, adam_step, train_.grad_clip, 0.0, loss_scale,
                   ZeroOptimizer::NonFinite::Skip);
}

StepStats Trainer::step() {
  Backend& be = *be_;
  const double t_start = now_s();
  const BatchPlan& plan = batches_->plan();
  const std::int64_t n = plan.micro_batch;
  const std::uint64_t tp0 = ctx_->tp->stats().bytes, pp0 = ctx_->pp->stats().bytes,
                      dp0 = ctx_->dp->stats().bytes, syncs0 = be.host_syncs();
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
  teacher_out_.clear();
  model_->params().zero_grads();
  if (lora_) lora_->zero_grads();
  const Tensor terms = terms_.tensor({plan.microbatches * n, 3}, DType::F32);

  // d(mean over a microbatch) scaled to the step's mean over its microbatches (and, through the
  // ZeRO reduction, over dp); under fp16 loss scaling the backward carries d(S x loss).
  const DiTPipelineHooks hooks = step_hooks(terms, static_cast<float>(scaler_.scale() / plan.microbatches));
  DiTPipelineStage stage(be, *model_, n, hooks, teacher_.get());
  const PipelineTiming timing = executor_->run(
      make_schedule(train_.schedule, ctx_->layout.pp, ctx_->coord.pp, plan.microbatches, train_.virtual_stages),
      plan.microbatches, stage, train_.stage.placement);

  const double t_opt = now_s();
  LrConfig lc{train_.adamw.lr, train_.warmup, train_.lr_schedule, train_.min_lr, train_.steps};
  st.lr = lr_at(lc, step_);
  // AdamW counts the updates it applied; EMA warmup counts steps, as the official loop does.
  st.loss_scale = scaler_.scale();
  const std::int64_t adam_step = step_ + 1 - scaler_.state().skipped_steps;
  inject_nonfinite_gradient(step_ + 1);
  // A step whose gradient norm is not finite is skipped at every precision (nothing non-finite
  // reaches the weights, the moments or the EMA); on finite gradients Skip and Apply are the same.
  const ZeroOptimizer::Result r =
      zero_->step(train_.adamw, st.lr, adam_step, train_.grad_clip,
                  ema_decay_at(train_.ema_decay, train_.ema_warmup, step_), st.loss_scale,
                  ZeroOptimizer::NonFinite::Skip);
  st.grad_norm = r.grad_norm;
  st.skipped = !r.applied;
  st.nonfinite_at_scale_one = scaler_.enabled() && st.skipped && st.loss_scale <= 1.0;
  scaler_.update(r.applied);
  st.nonfinite_in_row = scaler_.state().nonfinite_in_row;
  if (gates_ && r.applied) update_gates(st.loss_scale);
  if (lora_ && r.applied) update_lora(adam_step, st.loss_scale);
  gather_losses(terms, st);

  StepAccounting& a = st.acct;
  a.tp_bytes = ctx_->tp->stats().bytes - tp0;
  a.pp_bytes = ctx_->pp->stats().bytes - pp0;
  a.dp_bytes = ctx_->dp->stats().bytes - dp0;
  a.compute_s = timing.compute_s;
  a.pp_wait_s = timing.wait_s;
  a.op_f_s = timing.mean_forward_s(), a.op_b_s = timing.mean_backward_s(), a.op_w_s = timing.mean_weight_s();
  a.optimizer_s = now_s() - t_opt;
  a.step_s = now_s() - t_start;
  a.measured_bubble = timing.wait_s / std::max(1e-12, timing.wait_s + timing.compute_s);
  a.theoretical_bubble = theoretical_bubble(train_.schedule, ctx_->layout.pp, plan.microbatches, train_.virtual_stages);
  workspace_peak_ = std::max(workspace_peak_, stage.scratch_peak_bytes());
  a.activation_bytes = executor_->peak_activation_bytes() + stage.scratch_peak_bytes();
  a.host_syncs = be.host_syncs() - syncs0;
  ++step_;
  return st;
}

}  // namespace dit
