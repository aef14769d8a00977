// AdamW with EMA over a flat range of parameters, designed for ZeRO-1: an Optimizer owns the fp32
// state (master weights, exp_avg, exp_avg_sq, EMA) of ONE contiguous range [begin, end) of a
// model slice's flat parameter buffer. With one data-parallel rank the range is everything; with
// dp ranks each owns 1/dp of it and the parallel runtime reduce-scatters grads and all-gathers
// params around step().
#pragma once

#include <cstdint>
#include <optional>

#include "backend/backend.h"
#include "layers/params.h"
#include "core/named.h"

namespace dit {

struct AdamWConfig {
  double lr = 1e-4;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;  // the official DiT trains with AdamW(lr=1e-4, weight_decay=0)
};

class Optimizer {
 public:
  // Owns the state of elements [begin, end) of ps's flat buffers, in be's memory; or, given a
  // `host` backend (optimizer offload), in host memory, where AdamW then runs, `piece` elements at a
  // time between be's gradients and parameters (a separate fp32 master then, at every precision).
  Optimizer(Backend& be, const ParamSet& ps, std::int64_t begin, std::int64_t end, Backend* host = nullptr,
            std::int64_t piece = 0);

  std::int64_t begin() const { return begin_; }
  std::int64_t end() const { return end_; }
  // The fp32 master copy of the range (a view into the params themselves when they are fp32).
  Tensor master() const { return master_; }
  Tensor exp_avg() const { return m_.tensor({end_ - begin_}, DType::F32); }
  Tensor exp_avg_sq() const { return v_.tensor({end_ - begin_}, DType::F32); }
  Tensor ema() const { return ema_.tensor({end_ - begin_}, DType::F32); }
  // The range's slice of the parameter buffer (compute dtype).
  Tensor params() const;

  // One AdamW step (step_number counts from 1) on the range with its gradients `grads` (the
  // range's reduced gradients, end - begin elements), then ema = decay * ema + (1 - decay) *
  // master, and the new values into the compute-dtype params of the range: one fused pass.
  // grad_scale multiplies every gradient as AdamW reads it (unscaling and clipping).
  void step(const AdamWConfig& cfg, double lr, std::int64_t step_number, const Tensor& grads,
            double grad_scale, double ema_decay);
  // Resets the EMA to the current master weights (start of training).
  void reset_ema();
  // The backend whose memory holds the state (the host backend under offload).
  Backend& state_backend() const { return host_ ? *host_ : *be_; }
  bool offloaded() const { return host_ != nullptr; }
  // Bytes of the state and, offloaded, of the host staging of one piece.
  std::size_t bytes() const;

 private:
  Backend* be_;
  const ParamSet* ps_;
  std::int64_t begin_, end_;
  Backend* host_ = nullptr;
  std::int64_t piece_ = 0;
  Buffer master_own_;  // when the compute dtype is not fp32, or offloaded
  Tensor master_;
  Buffer m_, v_, ema_;
  Buffer host_grads_, host_params_;  // offloaded: one piece of gradients in and parameters out
};

// Learning rate at a step: linear warmup over `warmup` steps, then constant or cosine decay to
// min_lr at `total` steps.
enum class LrSchedule : std::uint8_t { Constant, Cosine };
inline constexpr Named<LrSchedule> kLrScheduleNames[] = {{LrSchedule::Constant, "constant"},
                                                         {LrSchedule::Cosine, "cosine"}};
struct LrConfig {
  double lr = 1e-4;
  std::int64_t warmup = 0;
  LrSchedule schedule = LrSchedule::Constant;
  double min_lr = 0.0;
  std::int64_t total = 0;
};
double lr_at(const LrConfig& c, std::int64_t step);  // step counts from 0

// EMA decay at step n (counting from 0): the configured decay, warmed up as
// min(decay, (1 + n) / (10 + n)) unless warmup is off: at 0.9999 from step 0, the EMA of a short
// run is mostly its zero-initialized start.
double ema_decay_at(double decay, bool warmup, std::int64_t n);

// torch.nn.utils.clip_grad_norm_: the factor min(1, max_norm / (norm + 1e-6)); 1 when
// max_norm <= 0 (clipping off).
double clip_factor(double total_norm, double max_norm);

}  // namespace dit
