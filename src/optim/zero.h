// ZeRO-1 over data-parallel ranks: each dp rank owns 1/dp of a stage's flat parameter range and
// keeps the fp32 master weights, Adam moments and EMA of that shard only. A step:
//   1. reduce-scatter the flat fp32 grads over dp (sum): in fp32, or, when asked (reduce_dtype
//      BF16), through bf16 copies that halve the bytes sent, the shard widened back to fp32;
//   2. global grad norm of the mean over dp replicas, unscaled by the fp16 loss scale: one sum of
//      squares over the shard's counted ranges (tensors replicated over tp count on tp rank 0
//      only), summed over dp, tp and pp; the clipping factor;
//   3. AdamW and EMA on the shard in one fused pass (which also refreshes 16-bit parameters from
//      the fp32 masters), AdamW reading each gradient times 1/(dp x loss scale) x clip; with fp16
//      loss scaling a non-finite norm skips this step on every rank;
//   4. all-gather the updated parameters over dp.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "optim/adamw.h"
#include "parallel/grid.h"

namespace dit {

class ZeroOptimizer {
 public:
  // The ParamSet must be padded to a multiple of dp (DiTStage's pad_multiple).
  ZeroOptimizer(Backend& be, ParamSet& ps, ParallelContext& ctx, DType reduce_dtype = DType::F32);

  struct Result {
    double grad_norm = 0;  // global norm before clipping, of the unscaled gradients
    bool applied = true;   // false: skipped (non-finite gradients under loss scaling)
  };
  // max_norm <= 0: no clipping. The grads hold d(loss_scale x loss); NonFinite::Skip (fp16 loss
  // scaling) leaves params, moments and EMA untouched when any gradient is inf or NaN.
  enum class NonFinite : std::uint8_t { Apply, Skip };
  Result step(const AdamWConfig& cfg, double lr, std::int64_t step_number, double max_norm,
              double ema_decay, double loss_scale = 1.0, NonFinite nonfinite = NonFinite::Apply);

  Optimizer& shard() { return *opt_; }
  const Optimizer& shard() const { return *opt_; }
  std::int64_t shard_begin() const { return begin_; }
  std::int64_t shard_size() const { return end_ - begin_; }
  // Bytes of optimizer state this rank holds (master if separate, exp_avg, exp_avg_sq, EMA).
  std::size_t state_bytes() const;
  // Bytes of the dp reduce-scatter buffers (dp > 1): the fp32 shard, and the bf16 copies.
  std::size_t shard_grad_bytes() const {
    return shard_grads_.bytes() + reduce_full_.bytes() + reduce_shard_.bytes();
  }

 private:
  Backend* be_;
  ParamSet* ps_;
  ParallelContext* ctx_;
  std::int64_t begin_, end_;
  Buffer shard_grads_;  // dp > 1: the reduce-scatter output
  Buffer reduce_full_, reduce_shard_;  // dp > 1 and a bf16 reduction: its input and output
  std::unique_ptr<Optimizer> opt_;
  Buffer counted_;  // (R, 2) int32 shard-relative [begin, end) ranges in the norm
  std::int64_t counted_ranges_ = 0;
};

}  // namespace dit
