// Pipeline schedule lists (see schedule.h).
#include "parallel/schedule.h"

#include <algorithm>

#include "core/error.h"

namespace dit {

namespace {
void check_args(int pp, int stage, int m) {
  DIT_CHECK(pp > 0 && stage >= 0 && stage < pp && m > 0, "pipeline schedule: stage ", stage,
            " of ", pp, " stages with ", m, " microbatches");
}
}  // namespace

ScheduleKind parse_schedule(const std::string& name) {
  if (name == "1f1b") return ScheduleKind::OneFOneB;
  if (name == "gpipe") return ScheduleKind::GPipe;
  DIT_FAIL("unknown pipeline schedule '", name, "': expected 1f1b or gpipe");
}

std::string schedule_name(ScheduleKind k) { return k == ScheduleKind::GPipe ? "gpipe" : "1f1b"; }

std::vector<Action> make_1f1b(int pp, int stage, int m) {
  check_args(pp, stage, m);
  const int warmup = std::min(pp - stage - 1, m);
  std::vector<Action> a;
  int next_f = 0, next_b = 0;
  // Warmup: fill the pipeline downstream of this stage.
  for (int i = 0; i < warmup; ++i) a.push_back({Op::Forward, next_f++});
  // Steady state: one forward, one backward.
  while (next_f < m) {
    a.push_back({Op::Forward, next_f++});
    a.push_back({Op::Backward, next_b++});
  }
  // Cooldown: drain the backwards still owed.
  while (next_b < m) a.push_back({Op::Backward, next_b++});
  return a;
}

std::vector<Action> make_gpipe(int pp, int stage, int m) {
  check_args(pp, stage, m);
  std::vector<Action> a;
  for (int i = 0; i < m; ++i) a.push_back({Op::Forward, i});
  for (int i = 0; i < m; ++i) a.push_back({Op::Backward, i});
  return a;
}

std::vector<Action> make_schedule(ScheduleKind kind, int pp, int stage, int m) {
  return kind == ScheduleKind::GPipe ? make_gpipe(pp, stage, m) : make_1f1b(pp, stage, m);
}

std::vector<Action> make_forward_only(int m) {
  std::vector<Action> a;
  for (int i = 0; i < m; ++i) a.push_back({Op::Forward, i});
  return a;
}

int max_in_flight(const std::vector<Action>& actions) {
  int live = 0, peak = 0;
  for (const Action& a : actions) {
    live += a.op == Op::Forward ? 1 : -1;
    peak = std::max(peak, live);
  }
  return peak;
}

double theoretical_bubble(int pp, int m) { return double(pp - 1) / double(m + pp - 1); }

}  // namespace dit
