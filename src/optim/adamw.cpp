// AdamW/EMA state over a flat range, learning-rate schedules and clipping factors.
#include "optim/adamw.h"

#include <algorithm>
#include <cmath>

namespace dit {

Optimizer::Optimizer(Backend& be, const ParamSet& ps, std::int64_t begin, std::int64_t end, Backend* host,
                     std::int64_t piece)
    : be_(&be), ps_(&ps), begin_(begin), end_(end), host_(host) {
  DIT_CHECK(0 <= begin && begin <= end && end <= ps.padded_numel(), "optimizer range [", begin,
            ", ", end, ") outside a parameter buffer of ", ps.padded_numel());
  const std::int64_t n = end - begin;
  Backend& owner = state_backend();
  if (be.compute_dtype() == DType::F32 && !host) {
    master_ = params();
  } else {
    master_own_ = Buffer(owner, static_cast<std::size_t>(n) * 4);
    master_ = master_own_.tensor({n}, DType::F32);
    be.copy(master_, params());
  }
  m_ = Buffer(owner, static_cast<std::size_t>(n) * 4);
  v_ = Buffer(owner, static_cast<std::size_t>(n) * 4);
  ema_ = Buffer(owner, static_cast<std::size_t>(n) * 4);
  owner.fill(exp_avg(), 0.f);
  owner.fill(exp_avg_sq(), 0.f);
  if (host) {
    piece_ = std::max<std::int64_t>(1, std::min(piece > 0 ? piece : n, n));
    host_grads_ = Buffer(*host, static_cast<std::size_t>(piece_) * 4);
    host_params_ = Buffer(*host, static_cast<std::size_t>(piece_) * dtype_size(be.compute_dtype()));
  }
  reset_ema();
}

std::size_t Optimizer::bytes() const {
  return master_own_.bytes() + m_.bytes() + v_.bytes() + ema_.bytes() + host_grads_.bytes() + host_params_.bytes();
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
  if (!host_) {
    const Tensor storage = master_.data != params().data ? params() : Tensor{};
    be_->adamw_ema_step(master_, grads, exp_avg(), exp_avg_sq(), ema(), storage, h, static_cast<float>(ema_decay));
    return;
  }
  // Offloaded: a piece of gradients to the host, AdamW and EMA there, the new parameters back.
  const std::int64_t n = end_ - begin_;
  const Tensor p = params(), m = exp_avg(), v = exp_avg_sq(), e = ema();
  for (std::int64_t at = 0; at < n; at += piece_) {
    const std::int64_t len = std::min(piece_, n - at);
    // Gradients already in host memory (ZeRO-Offload's reduced shard, or the CPU backend's) are read there.
    const bool down = grads.device != Device::Host;
    const Tensor g = down ? host_grads_.tensor({len}, DType::F32) : grads.rows(at, len);
    const Tensor out = host_params_.tensor({len}, be_->compute_dtype());
    if (down) be_->copy(g, grads.rows(at, len));
    host_->adamw_ema_step(master_.rows(at, len), g, m.rows(at, len), v.rows(at, len), e.rows(at, len), out, h,
                          static_cast<float>(ema_decay));
    be_->copy(p.rows(at, len), out);
  }
}

void Optimizer::reset_ema() { state_backend().copy(ema(), master_); }

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
