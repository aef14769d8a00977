// The loss spike watch (see loss_spike.h).
#include "engine/loss_spike.h"

#include <cmath>
#include <cstdio>

namespace dit {

std::string LossSpikeWatch::check(std::int64_t step, double loss) {
  if (z_limit_ <= 0 || !std::isfinite(loss)) return "";
  std::string line;
  if (recent_.size() >= static_cast<std::size_t>(window_ / 2)) {
    double mean = 0, var = 0;
    for (double x : recent_) mean += x;
    mean /= double(recent_.size());
    for (double x : recent_) var += (x - mean) * (x - mean);
    const double sd = std::sqrt(var / double(recent_.size() - 1));
    const double z = sd > 0 ? (loss - mean) / sd : 0;
    if (z > z_limit_) {
      char b[320];
      std::snprintf(b, sizeof b,
                    "loss spike at step %lld: %.6g is %.1f standard deviations above the mean %.6g of the last %zu "
                    "steps (train.loss_spike_z = %g)",
                    static_cast<long long>(step), loss, z, mean, recent_.size(), z_limit_);
      line = b;
    }
  }
  recent_.push_back(loss);
  if (recent_.size() > static_cast<std::size_t>(window_)) recent_.pop_front();
  return line;
}

}  // namespace dit
