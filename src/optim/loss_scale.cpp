// Dynamic loss scaling (see loss_scale.h).
#include "optim/loss_scale.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace dit {

LossScaler::LossScaler(LossScaling scaling, std::int64_t growth_interval, double initial_scale)
    : enabled_(scaling == LossScaling::Dynamic), growth_interval_(growth_interval), initial_(initial_scale) {
  const bool enabled = enabled_;
  DIT_CHECK(growth_interval >= 1, "loss scaling: growth interval ", growth_interval, ", expected >= 1");
  DIT_CHECK(std::isfinite(initial_scale) && initial_scale >= 1, "loss scaling: initial scale ",
            initial_scale, ", expected a finite number >= 1");
  s_.active = enabled;
  if (enabled) s_.scale = initial_scale;
}

bool LossScaler::update(bool grads_finite) {
  if (!grads_finite) {
    ++s_.skipped_steps;
    ++s_.nonfinite_in_row;
    if (enabled_) {
      s_.scale = std::max(1.0, s_.scale / 2);
      s_.clean_steps = 0;
    }
    return false;
  }
  s_.nonfinite_in_row = 0;
  if (!enabled_) return true;
  if (++s_.clean_steps >= growth_interval_) {
    s_.scale *= 2;
    s_.clean_steps = 0;
  }
  return true;
}

void LossScaler::restore(const LossScaleState& s) {
  DIT_CHECK(s.clean_steps >= 0 && s.skipped_steps >= 0, "loss scaling state: negative step counts (",
            s.clean_steps, ", ", s.skipped_steps, ")");
  if (!enabled_) {
    s_ = LossScaleState{1.0, 0, s.skipped_steps, false, 0};
    return;
  }
  if (!s.active) {  // from an fp32 or bf16 run: start scaling as a new fp16 run does
    s_ = LossScaleState{initial_, 0, s.skipped_steps, true, 0};
    return;
  }
  DIT_CHECK(std::isfinite(s.scale) && s.scale >= 1.0, "loss scale ", s.scale,
            ": expected a finite number >= 1");
  s_ = s;
  s_.nonfinite_in_row = 0;
}

}  // namespace dit
