// AdamW/EMA state over a flat range, learning-rate schedules and clipping factors.
#include "optim/adamw.h"

#include <algorithm>
#include <cmath>

namespace dit {

Optimizer::Optimizer(Backend& be, const ParamSet& ps, std::int64_t begin, std::int64_t end)
    : be_(&be), ps_(&ps), begin_(begin), end_(end) {
  DIT_CHECK(0 <= begin && begin <= end && end <= ps.padded_numel(), "optimizer range [", begin,
            ", ", end, ") outside a parameter buffer of ", ps.padded_numel());
  const std::int64_t n = end - begin;
  if (be.compute_dtype() == DType::F32) {
    master_ = params();
  } else {
    master_own_ = Buffer(be, static_cast<std::size_t>(n) * 4);
    master_ = master_own_.tensor({n}, DType::F32);
    be.copy(master_, params());
  }
  m_ = Buffer(be, static_cast<std::size_t>(n) * 4);
  v_ = Buffer(be, static_cast<std::size_t>(n) * 4);
  ema_ = Buffer(be, static_cast<std::size_t>(n) * 4);
  be.fill(exp_avg(), 0.f);
  be.fill(exp_avg_sq(), 0.f);
  reset_ema();
}

Tensor Optimizer::params() const {
  const Tensor all = ps_->flat_values();
  return all.rows(begin_, end_ - begin_);
}

void Optimizer::step(const AdamWConfig& cfg, double lr, std::int64_t t, const Tensor& grads,
                     double grad_scale, double ema_decay) {
  DIT_CHECK(t >= 1, "AdamW step numbers count from 1, got ", t);
  math::AdamWParams h;
  h.lr = static_cast<float>(lr);
  h.beta1 = static_cast<float>(cfg.beta1);
  h.beta2 = static_cast<float>(cfg.beta2);
  h.eps = static_cast<float>(cfg.eps);
  h.weight_decay = static_cast<float>(cfg.weight_decay);
  h.bc1 = static_cast<float>(1.0 - std::pow(cfg.beta1, static_cast<double>(t)));
  h.bc2 = static_cast<float>(1.0 - std::pow(cfg.beta2, static_cast<double>(t)));
  h.grad_scale = static_cast<float>(grad_scale);
  const Tensor storage = master_.data != params().data ? params() : Tensor{};
  be_->adamw_ema_step(master_, grads, exp_avg(), exp_avg_sq(), ema(), storage, h,
                      static_cast<float>(ema_decay));
}

void Optimizer::reset_ema() { be_->copy(ema(), master_); }

double lr_at(const LrConfig& c, std::int64_t step) {
  if (c.warmup > 0 && step < c.warmup) return c.lr * static_cast<double>(step + 1) / c.warmup;
  if (c.schedule == LrSchedule::Constant || c.total <= c.warmup) return c.lr;
  const double progress =
      std::min(1.0, static_cast<double>(step - c.warmup) / static_cast<double>(c.total - c.warmup));
  return c.min_lr + 0.5 * (c.lr - c.min_lr) * (1.0 + std::cos(M_PI * progress));
}

double ema_decay_at(double decay, bool warmup, std::int64_t n) {
  if (!warmup) return decay;
  return std::min(decay, (1.0 + static_cast<double>(n)) / (10.0 + static_cast<double>(n)));
}

double clip_factor(double total_norm, double max_norm) {
  if (max_norm <= 0 || !std::isfinite(total_norm)) return 1.0;
  return std::min(1.0, max_norm / (total_norm + 1e-6));
}

}  // namespace dit
