// Kernel and span time of a timed backend (see timed_backend.h).
#include "backend/timed_backend.h"

namespace dit {

void TimedBackend::reset() {
  in_.synchronize();
  in_.clear_marks();
  pairs_.clear();
  start_ = in_.mark();
  enabled_ = true;
}

double TimedBackend::kernel_seconds() {
  in_.synchronize();
  double s = 0;
  for (const auto& [a, b] : pairs_) s += in_.seconds_between(a, b);
  return s;
}

double TimedBackend::span_seconds() {
  const std::size_t now = in_.mark();
  in_.synchronize();
  return in_.seconds_between(start_, now);
}

}  // namespace dit
