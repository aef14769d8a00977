// The training step's optional parts (see step_parts.h).
#include "engine/step_parts.h"

#include <algorithm>

#include "layers/lora.h"

namespace dit {

namespace {

// Sums a per-sample terms tensor's columns into sums[0..width).
void add_columns(Backend& be, const Tensor& t, int width, double* sums) {
  std::vector<float> host(static_cast<std::size_t>(t.numel()));
  be.copy(Tensor{host.data(), DType::F32, t.shape, Device::Host}, t);
  for (std::size_t i = 0; i < host.size(); ++i) sums[static_cast<int>(i) % width] += host[i];
}

std::int64_t samples_per_step(const BatchPlan& plan) { return std::int64_t(plan.microbatches) * plan.micro_batch; }

}  // namespace

std::vector<std::unique_ptr<StepPart>> make_step_parts(const PartContext& pc) {
  const TrainConfig& t = pc.setup->train;
  std::vector<std::unique_ptr<StepPart>> parts;
  if (t.distill.enabled()) parts.push_back(std::make_unique<DistillPart>(pc));
  if (t.gates.enabled()) parts.push_back(std::make_unique<GatePart>(pc));
  if (t.lora.enabled()) parts.push_back(std::make_unique<LoraPart>(pc));
  return parts;
}

DistillPart::DistillPart(const PartContext& pc)
    : be_(pc.be), counts_output_(pc.holds_output && pc.ctx->tp->rank() == 0),
      counts_features_(!pc.setup->train.distill.pairs.empty() && pc.ctx->tp->rank() == 0),
      settings_(pc.setup->train.distill), samples_(samples_per_step(pc.setup->batch)) {
  const TrainSetup& setup = *pc.setup;
  teacher_ = std::make_unique<TeacherStage>(*pc.be, settings_.teacher_model, setup.teacher_stage_chunks(pc.ctx->coord.pp),
                                            *pc.ctx->tp, *pc.model, settings_,
                                            setup.train.zero >= 3 ? pc.ctx->dp.get() : nullptr, setup.train.overlap);
  if (pc.be->device() != Device::Virtual) teacher_->load(settings_.teacher);  // the planner's buffers hold no values
  kd_terms_ = Buffer(*pc.be, static_cast<std::size_t>(samples_) * 2 * sizeof(float));
  feature_terms_ = Buffer(*pc.be, static_cast<std::size_t>(samples_) * sizeof(float));
}

// The teacher's outputs wait for their microbatch's loss; its feature losses add up per step.
void DistillPart::begin_step(const StepView& view, DiTPipelineHooks& hooks) {
  teacher_out_.clear();
  const Tensor features = feature_terms_.tensor({samples_}, DType::F32);
  be_->fill(features, 0.f);
  const double pairs = std::max<std::size_t>(settings_.pairs.size(), 1);
  teacher_->begin_step(static_cast<float>(view.grad_scale * settings_.feature_weight_at(view.step, view.steps) / pairs),
                       features);
  hooks.on_companion_output = [this](int mb, const Tensor& t) { teacher_out_[mb] = t; };
}

void DistillPart::add_output_loss(const OutputLoss& o) {
  const auto t = teacher_out_.find(o.mb);
  DIT_CHECK(t != teacher_out_.end(), "distillation: no teacher output for microbatch ", o.mb);
  const std::int64_t n = o.out.dim(0);
  const Tensor kd = kd_terms_.tensor({samples_, 2}, DType::F32);
  const float scale = o.grad_scale * static_cast<float>(settings_.output_weight);
  be_->sample_loss(output_distill_fn(o.kind, o.x0, t->second, scale),
                   {.a = o.out,
                    .b = t->second,
                    .grad = o.dout,
                    .x0 = o.x0,
                    .noise = o.noise,
                    .t = o.t,
                    .coefs = o.coefs,
                    .terms = kd.rows(o.mb * n, n)});
  teacher_out_.erase(t);
}

void DistillPart::local_sums(double* sums) const {
  double kd[2] = {0, 0};
  if (counts_output_) add_columns(*be_, kd_terms_.tensor({samples_, 2}, DType::F32), 2, kd);
  sums[0] = kd[0] + kd[1];
  sums[1] = 0;
  if (counts_features_) add_columns(*be_, feature_terms_.tensor({samples_}, DType::F32), 1, sums + 1);
}

std::vector<LossTerm> DistillPart::terms(const double* sums, double samples, const StepView& view) const {
  const double pairs = static_cast<double>(settings_.pairs.size());
  return {{"kd", sums[0] / samples, settings_.output_weight},
          {"feature", pairs == 0 ? 0.0 : sums[1] / samples / pairs, settings_.feature_weight_at(view.step, view.steps)}};
}

GatePart::GatePart(const PartContext& pc)
    : ctx_(pc.ctx), be_(pc.be), model_(pc.model), plan_(pc.setup->batch), depth_(pc.setup->model.depth),
      counts_(pc.setup->train.stage.sequence_parallel || pc.ctx->tp->rank() == 0),
      gates_(pc.setup->train.gates, pc.setup->train.seed),
      grads_(*pc.be, static_cast<std::size_t>(samples_per_step(plan_) * depth_) * sizeof(float)) {}

void GatePart::begin_step(const StepView& view, DiTPipelineHooks& hooks) {
  step_ = view.step;
  gates_.begin_step(view.step, view.steps);
  be_->fill(grads_.tensor({std::int64_t(depth_) * samples_per_step(plan_)}, DType::F32), 0.f);
  hooks.block_gates = [this](int mb, int chunk) { return block_gates(mb, chunk); };
}

std::vector<BlockGate> GatePart::block_gates(int mb, int chunk) {
  const std::int64_t n = plan_.micro_batch;
  gates_.sample(mb, plan_.first_position(step_, ctx_->coord.dp, mb), n);
  const Tensor grads = grads_.tensor({std::int64_t(depth_) * plan_.microbatches, n}, DType::F32);
  std::vector<BlockGate> out;
  const StageLayout& l = model_->layout(chunk);
  for (int b = l.first_block; b < l.end_block; ++b)
    out.push_back({gates_.mask(mb, b), grads.rows(std::int64_t(b) * plan_.microbatches + mb, 1).view({n})});
  return out;
}

// dL/dm of this rank's blocks and samples, in the backward's scale (the loss scale, and the mean
// over this dp replica's batch): one download; each tp group adds its share once (every tp rank
// holds all tokens' sum without sequence parallelism, a part of it with).
void GatePart::after_update(std::int64_t, double loss_scale) {
  const std::int64_t n = plan_.micro_batch, rows = std::int64_t(depth_) * plan_.microbatches;
  std::vector<float> dm(static_cast<std::size_t>(rows * n));
  be_->copy(Tensor{dm.data(), DType::F32, {rows, n}, Device::Host}, grads_.tensor({rows, n}, DType::F32));
  std::vector<float> block_major(static_cast<std::size_t>(depth_ * n));
  for (int mb = 0; mb < plan_.microbatches; ++mb) {
    for (int b = 0; b < depth_; ++b)
      std::copy_n(dm.data() + (std::int64_t(b) * plan_.microbatches + mb) * n, n, block_major.data() + b * n);
    gates_.backward(mb, block_major.data(), counts_ ? 1.0 : 0.0);
  }
  gates_.update(*ctx_->world, loss_scale * plan_.dp);
}

LoraPart::LoraPart(const PartContext& pc) : ctx_(pc.ctx), train_(pc.setup->train) {
  Backend& be = *pc.be;
  const int r = train_.lora.rank;
  adapters_ = std::make_unique<ParamSet>(be, declare_lora(pc.model->params().specs(), r), pc.ctx->tp->size(),
                                         pc.ctx->tp->rank(), pc.ctx->layout.dp);
  adapters_->initialize(train_.seed);
  zero_ = std::make_unique<ZeroOptimizer>(be, *adapters_, *pc.ctx, ZeroOptions{.reduce_dtype = train_.grad_reduce});
  // The most rows a block linear sees: a microbatch's tokens, all of them under sequence parallelism.
  const std::int64_t rows = std::int64_t(pc.setup->batch.micro_batch) * pc.setup->model.num_patches();
  const std::size_t bytes = static_cast<std::size_t>(rows * r) * dtype_size(be.compute_dtype());
  t_ = Buffer(be, bytes);
  u_ = Buffer(be, bytes);
  pc.model->attach_lora(*adapters_, train_.lora.scale(), t_.tensor({rows, r}, be.compute_dtype()),
                        u_.tensor({rows, r}, be.compute_dtype()));
}

void LoraPart::begin_step(const StepView&, DiTPipelineHooks&) { adapters_->zero_grads(); }

void LoraPart::after_update(std::int64_t adam_step, double loss_scale) {
  if (ctx_->tp->size() > 1)
    for (std::size_t i = 0; i < adapters_->size(); ++i)
      if (lora_grad_is_tp_partial(adapters_->specs()[i])) ctx_->tp->all_reduce_sum(adapters_->grad(static_cast<int>(i)));
  AdamWConfig adamw = train_.adamw;
  adamw.lr = train_.lora.lr;
  adamw.weight_decay = 0;
  zero_->step(adamw, train_.lora.lr, adam_step, train_.grad_clip, 0.0, loss_scale, ZeroOptimizer::NonFinite::Skip);
}

}  // namespace dit
