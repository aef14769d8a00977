// The one clock of timings and ETAs: seconds on a monotonic clock (differences only; never a date).
#pragma once

#include <chrono>

namespace dit {

inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace dit
