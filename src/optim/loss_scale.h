// Dynamic loss scaling for fp16 training. fp16 has 5 exponent bits: gradients of a mean loss
// (often ~1e-6 per element) underflow to zero unless the loss is multiplied by a large scale S
// before backward; the optimizer then divides the gradients by S. The scale adapts:
//   start at 2^16 (train.loss_scale); a step whose gradients hold an inf or NaN is skipped (no AdamW, no EMA) and
//   halves S; after `growth_interval` (1000) clean steps in a row (train.loss_scale_window) S doubles; S never goes below 1.
// bf16 and fp32 have fp32's exponent range: the scaler is off there (S = 1), but a step whose
// gradient norm is not finite is still skipped and counted, never applied: nothing non-finite
// reaches the weights, whatever the precision. Its state is part of a checkpoint, so a resumed run
// continues with the same scale.
#pragma once

#include <cstdint>

namespace dit {

struct LossScaleState {
  double scale = 1.0;
  std::int64_t clean_steps = 0;    // steps since the last overflow (or since the scale grew)
  std::int64_t skipped_steps = 0;  // steps skipped for non-finite gradients since the run began
  bool active = false;             // saved by a run with loss scaling on (fp16)
  std::int64_t nonfinite_in_row = 0;  // skipped steps in a row up to now (not saved: a resume starts at 0)
};

// Whether a run scales its loss (fp16 storage) or not (fp32, bf16: scale 1, nothing skipped).
enum class LossScaling : std::uint8_t { Off, Dynamic };

class LossScaler {
 public:
  static constexpr double kInitialScale = 65536.0;  // 2^16
  static constexpr std::int64_t kGrowthInterval = 1000;

  explicit LossScaler(LossScaling scaling, std::int64_t growth_interval = kGrowthInterval,
                      double initial_scale = kInitialScale);

  bool enabled() const { return enabled_; }
  double scale() const { return s_.scale; }
  // Records a step's outcome: returns true when its update is to be applied (the gradients are
  // finite); a step with non-finite gradients is skipped (counted) whether scaling is on or off.
  bool update(bool grads_finite);
  const LossScaleState& state() const { return s_; }
  // Checks the scale (>= 1, finite) when enabled. A state saved without loss scaling (active
  // false: an fp32 or bf16 run) starts an enabled scaler at its initial scale.
  void restore(const LossScaleState& s);

 private:
  bool enabled_;
  std::int64_t growth_interval_;
  double initial_;
  LossScaleState s_;
};

}  // namespace dit
