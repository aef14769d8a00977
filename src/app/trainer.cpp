// Single-rank training step (see trainer.h).
#include "app/trainer.h"

#include <cmath>

#include "diffusion/losses.h"

namespace dit {

Trainer::Trainer(Backend& be, const DiTConfig& model, const TrainConfig& train, const Dataset& data)
    : be_(&be), cfg_(model), train_(train),
      schedule_(diffusion::create_diffusion({"", model.learn_sigma, 1000})), saved_(be),
      scratch_(be) {
  const SampleShape s = data.shape();
  DIT_CHECK(s.channels == model.in_channels && s.height == model.input_size &&
                s.width == model.input_size,
            "the dataset's samples are ", s.channels, "x", s.height, "x", s.width,
            " but the model takes ", model.in_channels, "x", model.input_size, "x", model.input_size);
  model_ = std::make_unique<DiTStage>(be, cfg_, StageLayout::whole(cfg_), self_);
  model_->params().initialize(train.seed);
  opt_ = std::make_unique<Optimizer>(be, model_->params(), 0, model_->params().numel());
  batches_ = std::make_unique<BatchSource>(data, schedule_, BatchPlan::make(train.global_batch, 1, train.micro_batch),
                                           train.seed, cfg_.class_dropout_prob, cfg_.num_classes);
}

StepStats Trainer::step() {
  Backend& be = *be_;
  const BatchPlan& plan = batches_->plan();
  const diffusion::ImageShape shape{plan.micro_batch, cfg_.in_channels, cfg_.input_size, cfg_.input_size};
  StepStats st;
  st.step = step_;
  ParamSet& ps = model_->params();
  ps.zero_grads();
  for (int mb = 0; mb < plan.microbatches; ++mb) {
    const Microbatch b = batches_->get(step_, 0, mb);
    saved_.reset();
    scratch_.reset();
    const std::int64_t n = b.n;
    std::vector<float> x(b.x_t.begin(), b.x_t.end());
    const auto model_t = schedule_.model_timesteps(b.t);
    std::vector<float> t(model_t.begin(), model_t.end());
    std::vector<std::int32_t> y = b.y;
    StageInputs in;
    in.images = saved_.tensor({n, cfg_.in_channels, cfg_.input_size, cfg_.input_size}, be.compute_dtype());
    be.copy(in.images, Tensor{x.data(), DType::F32, in.images.shape, Device::Host});
    in.t = saved_.tensor({n}, be.compute_dtype());
    be.copy(in.t, Tensor{t.data(), DType::F32, {n}, Device::Host});
    in.ids = saved_.tensor({n}, DType::I32);
    be.copy(in.ids, Tensor{y.data(), DType::I32, {n}, Device::Host});
    StageActs acts = model_->forward(in, saved_, scratch_);

    std::vector<float> out(static_cast<std::size_t>(acts.final.out.numel()));
    be.copy(Tensor{out.data(), DType::F32, acts.final.out.shape, Device::Host}, acts.final.out);
    const std::vector<double> out64(out.begin(), out.end());
    const auto terms = diffusion::training_losses(schedule_, shape, {out64, b.x_start, b.noise, b.t});
    for (std::int64_t i = 0; i < n; ++i) {
      st.loss += terms.loss[i] / plan.global_batch;
      st.mse += terms.mse[i] / plan.global_batch;
      if (!terms.vb.empty()) st.vb += terms.vb[i] / plan.global_batch;
    }
    // terms.grad_model_output is d mean over this microbatch; the step's loss is the mean over
    // all microbatches.
    std::vector<float> dout(terms.grad_model_output.size());
    for (std::size_t i = 0; i < dout.size(); ++i)
      dout[i] = static_cast<float>(terms.grad_model_output[i] / plan.microbatches);
    StageGrads g;
    g.dout = saved_.tensor(acts.final.out.shape, be.compute_dtype());
    be.copy(g.dout, Tensor{dout.data(), DType::F32, g.dout.shape, Device::Host});
    model_->backward(acts, g, scratch_);
  }
  st.grad_norm = std::sqrt(be.sum_squares(ps.flat_grads()));
  const double factor = clip_factor(st.grad_norm, train_.grad_clip);
  if (factor < 1.0) be.scale(ps.flat_grads(), static_cast<float>(factor));
  LrConfig lc{train_.adamw.lr, train_.warmup, train_.lr_schedule, train_.min_lr, train_.steps};
  st.lr = lr_at(lc, step_);
  opt_->step(train_.adamw, st.lr, step_ + 1);
  opt_->update_ema(ema_decay_at(train_.ema_decay, train_.ema_warmup, step_));
  ++step_;
  return st;
}

}  // namespace dit
