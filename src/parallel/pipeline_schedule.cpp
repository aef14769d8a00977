// Pipeline schedule lists (see pipeline_schedule.h).
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

// The ZB-H1 table (see the header): 1F1B's forwards and input backwards, with stage s holding back
// s weight backwards to run in its cool-down.
std::vector<Action> make_zb_h1(int pp, int stage, int m) {
  check_args(pp, stage, m);
  DIT_CHECK(pp >= 2, "the zb-h1 schedule needs at least 2 pipeline stages, not ", pp);
  const int warmup = std::min(pp - stage - 1, m), held = stage;
  std::vector<Action> a;
  int f = 0, b = 0, w = 0;
  auto input_then_weight = [&] {
    a.push_back({Op::BackwardInput, b++});
    if (b - w > held) a.push_back({Op::BackwardWeight, w++});
  };
  // Warm-up: fill the pipeline downstream of this stage.
  for (int i = 0; i < warmup; ++i) a.push_back({Op::Forward, f++});
  // Steady state: F, B (and W once more than `held` are owed).
  while (f < m) {
    a.push_back({Op::Forward, f++});
    input_then_weight();
  }
  // Cool-down: the Bs still owed, then the held Ws fill the tail.
  while (b < m) input_then_weight();
  while (w < m) a.push_back({Op::BackwardWeight, w++});
  return a;
}

namespace {
// Appends ops of one kind and chunk in microbatch order, dropping any past the m-th.
struct VTable {
  int m;
  std::vector<Action> a;
  int next[3][2] = {};  // [F, B, W][chunk]
  void put(Op op, int chunk) {
    const int k = op == Op::Forward ? 0 : op == Op::BackwardInput ? 1 : 2;
    if (next[k][chunk] < m) a.push_back({op, next[k][chunk]++, chunk});
  }
  int count(Op op, int chunk) const { return next[op == Op::Forward ? 0 : op == Op::BackwardInput ? 1 : 2][chunk]; }
};
}  // namespace

// The ZB-V table (see the header), stage s of p: chunk 0 runs down the ranks, chunk 1 back up.
std::vector<Action> make_zb_v(int pp, int stage, int m) {
  check_args(pp, stage, m);
  DIT_CHECK(pp >= 2, "the zb-v schedule needs at least 2 pipeline stages, not ", pp);
  constexpr Op F = Op::Forward, B = Op::BackwardInput, W = Op::BackwardWeight;
  const int s = stage, p = pp;
  VTable t{m, {}};
  // Warm-up: chunk 0 forwards down the V, then chunk 1 forwards as their inputs come back up,
  // then the first chunk-1 backwards (each with its W: the last rank turns the V at once).
  for (int i = 0; i < 2 * (p - s) - 1; ++i) t.put(F, 0);
  for (int i = 0; i < s; ++i) t.put(F, 1), t.put(F, 0);
  for (int i = 0; i < p - s; ++i) t.put(F, 1), t.put(B, 1), t.put(W, 1);
  // Steady state: one F, B and W of each chunk.
  while (t.count(F, 1) < m) {
    t.put(F, 0), t.put(B, 0), t.put(W, 0);
    t.put(F, 1), t.put(B, 1), t.put(W, 1);
  }
  // Cool-down: the Bs still owed, their Ws filling the tail.
  for (int i = 0; i < s; ++i) t.put(B, 0), t.put(B, 1);
  for (int i = 0; i < p - s; ++i) t.put(B, 0), t.put(W, 0);
  while (t.count(B, 0) < m) t.put(B, 0);  // (only when the table above ran short)
  while (t.count(B, 1) < m) t.put(B, 1);
  while (t.count(W, 1) < m) t.put(W, 1);
  while (t.count(W, 0) < m) t.put(W, 0);
  return t.a;
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
  const std::string name = schedule_name(kind);
  DIT_CHECK(v >= 1, v, " model chunks per rank: expected 1 or more");
  if (is_zero_bubble(kind))
    DIT_CHECK(pp >= 2, "the ", name, " schedule needs at least 2 pipeline stages, not ", pp,
              ": zero-bubble schedules fill pipeline bubbles; use 1f1b without a pipeline");
  if (kind == ScheduleKind::ZbV) {
    DIT_CHECK(v == 2, "the zb-v schedule needs 2 model chunks per rank, not ", v, ": ZB-V runs two chunks per rank in a V");
  } else if (kind == ScheduleKind::ZbH1) {
    DIT_CHECK(v == 1, "the zb-h1 schedule runs 1 model chunk per rank, not ", v, ": for two chunks per rank use zb-v");
  }
  if (v == 1) return;
  DIT_CHECK(kind == ScheduleKind::OneFOneB || kind == ScheduleKind::ZbV, v, " model chunks per rank need the 1f1b schedule "
            "(interleaved 1F1B), not ", name, "; GPipe has no virtual stages");
  DIT_CHECK(pp >= 2, v, " model chunks per rank need at least 2 pipeline stages, not ", pp,
            ": virtual stages interleave chunks over pipeline ranks");
  DIT_CHECK(std::int64_t(m) * v <= kMaxMicrobatches, v, " model chunks per rank with ", m, " microbatches: at most ",
            kMaxMicrobatches, " (chunk, microbatch) pairs per step (MPI tag space)");
}

void check_v_split(int pp, int blocks) {
  DIT_CHECK(pp >= 1 && blocks % (2 * pp) == 0, "the zb-v schedule needs the ", blocks,
            " blocks to split evenly into 2 x ", pp, " pipeline stages = ", 2 * pp, " chunks (a multiple of ", 2 * pp, ")");
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

std::vector<Action> make_pipeline_schedule(ScheduleKind kind, int pp, int stage, int m, int v) {
  check_virtual_stages(kind, pp, m, v);
  switch (kind) {
    case ScheduleKind::GPipe: return make_gpipe(pp, stage, m);
    case ScheduleKind::ZbH1: return make_zb_h1(pp, stage, m);
    case ScheduleKind::ZbV: return make_zb_v(pp, stage, m);
    case ScheduleKind::OneFOneB: break;
  }
  return v > 1 ? make_interleaved(pp, stage, m, v) : make_1f1b(pp, stage, m);
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
    live += a.op == Op::Forward ? 1 : a.op == Op::BackwardInput ? 0 : -1;
    peak = std::max(peak, live);
  }
  return peak;
}

double theoretical_bubble(int pp, int m, int v) {
  return double(pp - 1) / (double(v) * m + pp - 1);
}

double theoretical_bubble(ScheduleKind kind, int pp, int m, int v) {
  if (kind == ScheduleKind::ZbH1) return double(pp - 1) / (3.0 * m + pp - 1);
  if (kind == ScheduleKind::ZbV) return double(pp - 1) / (6.0 * m + pp - 1);
  return theoretical_bubble(pp, m, v);
}

}  // namespace dit
