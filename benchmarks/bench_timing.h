// The benchmark programs' timing: the median of timed calls on a backend (core/clock.h's clock),
// each call followed by the backend's synchronize so a device's queued work is in its time.
#pragma once

#include <algorithm>
#include <vector>

#include "backend/backend.h"
#include "core/clock.h"

namespace dit::bench {

// Median seconds of `reps` timed calls of fn after `warm` untimed ones (all of them in `all`).
template <typename Fn>
double median_s(Backend& be, int warm, int reps, Fn&& fn, std::vector<double>* all = nullptr) {
  for (int i = 0; i < warm; ++i) fn();
  be.synchronize();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const double t0 = now_s();
    fn();
    be.synchronize();
    t.push_back(now_s() - t0);
  }
  if (all != nullptr) *all = t;
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace dit::bench
