// A loss far above its recent values, found by the Trainer before its update (train.loss_spike_z):
// logged, and with train.skip_loss_spikes the update is skipped as a non-finite one is.
#pragma once

#include <cstdint>
#include <deque>
#include <string>

namespace dit {

// A loss far above its recent values: the z-score of each step's loss against the last `window`
// finite losses (after `window / 2` of them have been seen).
class LossSpikeWatch {
 public:
  explicit LossSpikeWatch(double z_limit, int window = 50) : z_limit_(z_limit), window_(window) {}
  // The spike's line ("" when none) for this step's loss; the loss joins the window.
  std::string check(std::int64_t step, double loss);

 private:
  double z_limit_;
  int window_;
  std::deque<double> recent_;
};

}  // namespace dit
