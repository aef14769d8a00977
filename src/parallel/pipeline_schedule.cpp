// Pipeline schedule lists (see schedule.h).
#include "parallel/pipeline_schedule.h"

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
  if (const auto k = value_of(kScheduleNames, name)) return *k;
  DIT_FAIL("unknown pipeline schedule '", name, "': expected ", names_of(kScheduleNames, " or "));
}

std::string schedule_name(ScheduleKind k) { return name_of(kScheduleNames, k); }

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

namespace {
// The order in which a rank visits its (chunk, microbatch) pairs: microbatches in groups of pp,
// each group through chunk 0, 1, ..., v - 1 (backward: v - 1, ..., 0). The m % pp leftover
// microbatches join the last group, which is then pp + m % pp long (m when m < pp).
std::vector<Action> visit_order(Op op, int pp, int m, int v) {
  std::vector<Action> out;
  const int groups = std::max(1, m / pp);
  for (int g = 0; g < groups; ++g) {
    const int first = g * pp, end = g + 1 == groups ? m : first + pp;
    for (int k = 0; k < v; ++k)
      for (int mb = first; mb < end; ++mb)
        out.push_back({op, mb, op == Op::Forward ? k : v - 1 - k});
  }
  return out;
}
}  // namespace

void check_virtual_stages(ScheduleKind kind, int pp, int m, int v) {
  DIT_CHECK(v >= 1, "parallel.virtual_stages = ", v, ": expected 1 or more chunks per rank");
  if (v == 1) return;
  DIT_CHECK(kind == ScheduleKind::OneFOneB, "parallel.virtual_stages = ", v,
            " needs parallel.schedule = \"1f1b\" (interleaved 1F1B); GPipe has no virtual stages");
  DIT_CHECK(pp >= 2, "parallel.virtual_stages = ", v, " needs parallel.pp >= 2 (it is ", pp,
            "): virtual stages interleave chunks over pipeline ranks");
  DIT_CHECK(m * v <= 16000, "parallel.virtual_stages = ", v, " with ", m,
            " microbatches: at most 16000 (chunk, microbatch) pairs per step (MPI tag space)");
}

std::vector<Action> make_interleaved(int pp, int stage, int m, int v) {
  check_args(pp, stage, m);
  check_virtual_stages(ScheduleKind::OneFOneB, pp, m, v);
  if (v == 1) return make_1f1b(pp, stage, m);
  const std::vector<Action> fwd = visit_order(Op::Forward, pp, m, v);
  const std::vector<Action> bwd = visit_order(Op::Backward, pp, m, v);
  const int total = m * v;
  // Megatron's warmup, with the last group's length in place of pp: enough forwards in flight
  // that the first backward's gradient can come back around every rank (checked for deadlock by
  // the tests for every pp <= 8, v <= 4, m <= 4 pp, multiples of pp or not).
  const int last_group = m < pp ? m : pp + m % pp;
  const int warmup = std::min(total, (pp - stage - 1) * 2 + (v - 1) * last_group);
  std::vector<Action> a(fwd.begin(), fwd.begin() + warmup);
  for (int k = 0; k < total - warmup; ++k) {
    a.push_back(fwd[warmup + k]);
    a.push_back(bwd[k]);
  }
  for (int k = total - warmup; k < total; ++k) a.push_back(bwd[k]);
  return a;
}

std::vector<Action> make_schedule(ScheduleKind kind, int pp, int stage, int m, int v) {
  check_virtual_stages(kind, pp, m, v);
  if (v > 1) return make_interleaved(pp, stage, m, v);
  return kind == ScheduleKind::GPipe ? make_gpipe(pp, stage, m) : make_1f1b(pp, stage, m);
}

std::vector<Action> make_forward_only(int m, int pp, int v) {
  check_virtual_stages(ScheduleKind::OneFOneB, pp, m, v);
  // Microbatch by microbatch, each through this rank's chunks in order. Forward only, a slot is
  // reused at the next action and waits for its last send's receiver to post; in this order that
  // receiver is at most one action ahead on the next rank, so the waits never form a cycle.
  std::vector<Action> a;
  for (int i = 0; i < m; ++i)
    for (int c = 0; c < v; ++c) a.push_back({Op::Forward, i, c});
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

double theoretical_bubble(int pp, int m, int v) {
  return double(pp - 1) / (double(v) * m + pp - 1);
}

}  // namespace dit
