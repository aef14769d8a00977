// CommWatch's description of where the run is (see watchdog.h).
#include "parallel/watchdog.h"

#include <utility>

namespace dit {

std::string CommWatch::where() const {
  std::string s = phase;
  if (step >= 0) s += " at step " + std::to_string(step);
  if (microbatch >= 0) s += ", microbatch " + std::to_string(microbatch) + (*action ? " (" + std::string(action) + ")" : "");
  return s;
}

WatchPhase::WatchPhase(CommWatch* w, std::string phase, double factor) : w_(w) {
  if (!w_) return;
  phase_ = std::exchange(w_->phase, std::move(phase));
  factor_ = std::exchange(w_->factor, factor);
}

WatchPhase::~WatchPhase() {
  if (!w_) return;
  w_->phase = std::move(phase_);
  w_->factor = factor_;
}

}  // namespace dit
