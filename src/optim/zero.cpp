// ZeRO-1 sharded optimizer step (see zero.h).
#include "optim/zero.h"

#include <algorithm>
#include <cmath>

namespace dit {

ZeroOptimizer::ZeroOptimizer(Backend& be, ParamSet& ps, ParallelContext& ctx, DType reduce_dtype)
    : be_(&be), ps_(&ps), ctx_(&ctx) {
  DIT_CHECK(reduce_dtype == DType::F32 || reduce_dtype == DType::BF16,
            "ZeRO: gradients are reduced in fp32 or bf16, not ", dtype_name(reduce_dtype));
  const int dp = ctx.dp->size(), r = ctx.dp->rank();
  DIT_CHECK(ps.padded_numel() % dp == 0, "ZeRO: a parameter buffer of ", ps.padded_numel(),
            " elements is not padded to a multiple of dp = ", dp);
  const std::int64_t shard = ps.padded_numel() / dp;
  begin_ = r * shard;
  end_ = begin_ + shard;
  if (dp > 1) shard_grads_ = Buffer(be, static_cast<std::size_t>(shard) * dtype_size(ParamSet::kGradDType));
  if (dp > 1 && reduce_dtype == DType::BF16) {
    reduce_full_ = Buffer(be, static_cast<std::size_t>(ps.padded_numel()) * dtype_size(DType::BF16));
    reduce_shard_ = Buffer(be, static_cast<std::size_t>(shard) * dtype_size(DType::BF16));
  }
  opt_ = std::make_unique<Optimizer>(be, ps, begin_, end_);
  // Tensors replicated over tp have identical grads on every tp rank: count them once.
  DIT_CHECK(shard <= 0x7fffffff, "ZeRO: a shard of ", shard, " elements exceeds the int32 ranges of "
            "the norm; use more data-parallel ranks or pipeline stages");
  std::vector<std::int32_t> ranges;
  for (std::size_t i = 0; i < ps.size(); ++i) {
    const ParamSpec& s = ps.specs()[i];
    if (s.split == Split::Replicated && ctx.tp->rank() != 0) continue;
    const std::int64_t a = std::max(begin_, ps.offset(static_cast<int>(i)));
    const std::int64_t b = std::min(end_, ps.offset(static_cast<int>(i)) + s.local(ps.tp()).numel());
    if (a >= b) continue;
    ranges.push_back(static_cast<std::int32_t>(a - begin_));
    ranges.push_back(static_cast<std::int32_t>(b - begin_));
  }
  counted_ranges_ = static_cast<std::int64_t>(ranges.size() / 2);
  if (counted_ranges_ > 0) {
    counted_ = Buffer(be, ranges.size() * sizeof(std::int32_t));
    be.copy(counted_.tensor({counted_ranges_, 2}, DType::I32),
            Tensor{ranges.data(), DType::I32, {counted_ranges_, 2}, Device::Host});
  }
}

std::size_t ZeroOptimizer::state_bytes() const {
  const std::size_t n = static_cast<std::size_t>(end_ - begin_);
  const bool separate_master = be_->compute_dtype() != DType::F32;
  return n * 4 * (3 + (separate_master ? 1 : 0));
}

ZeroOptimizer::Result ZeroOptimizer::step(const AdamWConfig& cfg, double lr,
                                          std::int64_t step_number, double max_norm,
                                          double ema_decay, double loss_scale, NonFinite nonfinite) {
  Backend& be = *be_;
  const int dp = ctx_->dp->size();
  const std::int64_t n = end_ - begin_;
  Tensor grads = ps_->flat_grads().rows(begin_, n);
  if (dp > 1) {
    grads = shard_grads_.tensor({n}, ParamSet::kGradDType);
    if (reduce_full_.bytes() > 0) {
      const Tensor full = reduce_full_.tensor({ps_->padded_numel()}, DType::BF16);
      const Tensor mine = reduce_shard_.tensor({n}, DType::BF16);
      be.copy(full, ps_->flat_grads());
      ctx_->dp->reduce_scatter_sum(full, mine);
      be.copy(grads, mine);
    } else {
      ctx_->dp->reduce_scatter_sum(ps_->flat_grads(), grads);
    }
  }
  const double unscale = 1.0 / (static_cast<double>(dp) * loss_scale);
  double sumsq =
      counted_ranges_ > 0 ? be.sum_squares_ranges(grads, counted_.tensor({counted_ranges_, 2}, DType::I32)) : 0.0;
  ctx_->world->all_reduce_sum(&sumsq, 1);
  Result r;
  r.grad_norm = std::sqrt(sumsq) * unscale;
  if (nonfinite == NonFinite::Skip && !std::isfinite(r.grad_norm)) {
    r.applied = false;
    return r;
  }
  const double factor = clip_factor(r.grad_norm, max_norm);
  opt_->step(cfg, lr, step_number, grads, factor * unscale, ema_decay);
  if (dp > 1) ctx_->dp->all_gather(opt_->params(), ps_->flat_values());
  return r;
}

}  // namespace dit
