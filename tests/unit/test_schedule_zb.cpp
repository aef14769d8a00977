// Zero-bubble schedules as data: ZB-H1 and ZB-V tables for every pp 2..8 and m 1..32 are
// complete (each microbatch's F, B and W once per chunk, in that order), deadlock-free across ranks
// under the simulator, and give the paper's bubbles at equal op times; the layouts they refuse
// get one message naming parallel.schedule.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "parallel/pipeline_schedule.h"
#include "parallel/schedule_sim.h"

namespace dit {

namespace {
std::vector<std::vector<Action>> lists_of(ScheduleKind kind, int pp, int m) {
  std::vector<std::vector<Action>> l;
  const int v = kind == ScheduleKind::ZbV ? 2 : 1;
  for (int s = 0; s < pp; ++s) l.push_back(make_pipeline_schedule(kind, pp, s, m, v));
  return l;
}
double no_link(int, const Action&) { return 0.0; }
PipelineSim run(ScheduleKind kind, int pp, int m, double tf, double tb, double tw) {
  auto cost = [=](int, const Action& a) {
    return a.op == Op::Forward ? tf : a.op == Op::BackwardInput ? tb : a.op == Op::BackwardWeight ? tw : tb + tw;
  };
  const int v = kind == ScheduleKind::ZbV ? 2 : 1;
  return simulate_pipeline(lists_of(kind, pp, m), v, cost, no_link, placement_of(kind));
}
double mean_idle(const PipelineSim& s) {
  double idle = 0;
  for (double b : s.busy) idle += s.makespan - b;
  return idle / static_cast<double>(s.busy.size());
}

// Each (chunk, microbatch) has one F, one B and one W, F before B before W, and Bs in microbatch
// order per chunk (the previous stage receives them in that order).
void expect_complete(const std::vector<Action>& a, int m, int v) {
  std::vector<int> f(m * v, -1), b(m * v, -1), w(m * v, -1);
  std::vector<int> last_b(v, -1);
  for (int i = 0; i < static_cast<int>(a.size()); ++i) {
    const Action& x = a[i];
    ASSERT_TRUE(x.chunk >= 0 && x.chunk < v && x.microbatch >= 0 && x.microbatch < m);
    ASSERT_NE(x.op, Op::Backward) << "a zero-bubble table splits every backward";
    auto& slot = x.op == Op::Forward ? f : x.op == Op::BackwardInput ? b : w;
    const int k = x.chunk * m + x.microbatch;
    ASSERT_EQ(slot[k], -1) << "op twice at " << i;
    slot[k] = i;
    if (x.op == Op::BackwardInput) {
      ASSERT_EQ(x.microbatch, last_b[x.chunk] + 1);
      last_b[x.chunk] = x.microbatch;
    }
  }
  for (int k = 0; k < m * v; ++k) {
    ASSERT_GE(f[k], 0);
    ASSERT_GT(b[k], f[k]);
    ASSERT_GT(w[k], b[k]);
  }
}
}  // namespace

TEST(ZeroBubble, TablesCompleteAndDeadlockFree) {
  for (ScheduleKind kind : {ScheduleKind::ZbH1, ScheduleKind::ZbV})
    for (int pp = 2; pp <= 8; ++pp)
      for (int m = 1; m <= 32; ++m) {
        const int v = kind == ScheduleKind::ZbV ? 2 : 1;
        for (int s = 0; s < pp; ++s) {
          const auto a = make_pipeline_schedule(kind, pp, s, m, v);
          ASSERT_EQ(static_cast<int>(a.size()), 3 * m * v);
          expect_complete(a, m, v);
        }
        const PipelineSim sim = run(kind, pp, m, 1, 1, 1);
        EXPECT_TRUE(sim.completed) << schedule_name(kind) << " pp " << pp << " m " << m;
        // and with unequal op times (as measured on CPUs: W cheaper than B)
        EXPECT_TRUE(run(kind, pp, m, 1.0, 1.3, 0.7).completed);
      }
}

// ZB-H1 is 1F1B's order of F and B with stage s holding back s Ws (the later stages finish their
// Bs earlier and fill the wait for the last with Ws): at most pp microbatches in flight on any
// stage (1F1B's peak on its first stage).
TEST(ZeroBubble, ZbH1IsTheTable) {
  constexpr Op F = Op::Forward, B = Op::BackwardInput, W = Op::BackwardWeight;
  const std::vector<Action> first = {{F, 0}, {F, 1}, {F, 2}, {F, 3}, {B, 0}, {W, 0},
                                     {B, 1}, {W, 1}, {B, 2}, {W, 2}, {B, 3}, {W, 3}};
  EXPECT_EQ(make_zb_h1(4, 0, 4), first);
  const std::vector<Action> last = {{F, 0}, {B, 0}, {F, 1}, {B, 1}, {F, 2}, {B, 2},
                                    {F, 3}, {B, 3}, {W, 0}, {W, 1}, {W, 2}, {W, 3}};
  EXPECT_EQ(make_zb_h1(4, 3, 4), last);
  for (int pp = 2; pp <= 8; ++pp)
    for (int s = 0; s < pp; ++s)
      for (int m = 1; m <= 16; ++m) {
        const auto a = make_zb_h1(pp, s, m), ref = make_1f1b(pp, s, m);
        std::vector<Action> fb;  // F and B only, B renamed to 1F1B's Backward
        for (Action x : a)
          if (x.op != W) fb.push_back({x.op == F ? F : Op::Backward, x.microbatch});
        EXPECT_EQ(fb, ref) << pp << " " << s << " " << m;
        EXPECT_LE(max_in_flight(a), std::min(pp, m));
      }
}

// The paper's tables on its own assumptions (T_F = T_B = T_W, free links).
TEST(ZeroBubble, SimulatedBubbles) {
  for (int pp = 2; pp <= 8; ++pp)
    for (int m = pp; m <= 4 * pp; m += pp) {
      // ZB-H1: idle (pp - 1) T_F per rank, (pp - 1) / 3m of the work; 1F1B's is 3 (pp - 1) T_F.
      const PipelineSim h1 = run(ScheduleKind::ZbH1, pp, m, 1, 1, 1);
      EXPECT_NEAR(mean_idle(h1) / (3.0 * m), (pp - 1) / (3.0 * m), 1e-12) << pp << " " << m;
      EXPECT_NEAR(h1.bubble(), theoretical_bubble(ScheduleKind::ZbH1, pp, m, 1), 1e-12);
      std::vector<std::vector<Action>> f1b;
      for (int s = 0; s < pp; ++s) f1b.push_back(make_1f1b(pp, s, m));
      const PipelineSim ref = simulate_pipeline(
          f1b, 1, [](int, const Action& a) { return a.op == Op::Forward ? 1.0 : 2.0; }, no_link);
      EXPECT_NEAR(mean_idle(ref), 3.0 * (pp - 1), 1e-12);
    }
  for (int pp = 2; pp <= 8; ++pp)
    for (int m = 2 * pp; m <= 32; m += 3) {
      // ZB-V: no rank idles between its first and last action; only the fill of the first
      // forward down the V remains ((pp - 1) chunk times per rank, whatever m).
      const PipelineSim v = run(ScheduleKind::ZbV, pp, m, 1, 1, 1);
      for (int r = 0; r < pp; ++r) EXPECT_NEAR(v.gap(r), 0.0, 1e-12) << "pp " << pp << " m " << m << " rank " << r;
      EXPECT_NEAR(mean_idle(v), pp - 1.0, 1e-12);
      EXPECT_NEAR(v.bubble(), theoretical_bubble(ScheduleKind::ZbV, pp, m, 2), 1e-12);
    }
  // The simulator has teeth: fusing ZB-H1's W into its B gives 1F1B's bubble back.
  const int pp = 4, m = 8;
  std::vector<std::vector<Action>> fused;
  for (int s = 0; s < pp; ++s) fused.push_back(make_1f1b(pp, s, m));
  auto two = [](int, const Action& a) { return a.op == Op::Forward ? 1.0 : 2.0; };
  EXPECT_GT(mean_idle(simulate_pipeline(fused, 1, two, no_link)), 2 * mean_idle(run(ScheduleKind::ZbH1, pp, m, 1, 1, 1)));
}

// Unequal op times (T_W < T_B, as measured on this code's CPU backend): the bubble grows for ZB-H1
// (W no longer fills the cool-down) but stays well under 1F1B's at the same op times.
TEST(ZeroBubble, UnequalOpTimes) {
  const double tf = 1.0, tb = 1.2, tw = 0.6;
  for (int pp : {2, 4, 8}) {
    const int m = 2 * pp;
    std::vector<std::vector<Action>> f1b;
    for (int s = 0; s < pp; ++s) f1b.push_back(make_1f1b(pp, s, m));
    const PipelineSim ref = simulate_pipeline(
        f1b, 1, [&](int, const Action& a) { return a.op == Op::Forward ? tf : tb + tw; }, no_link);
    const PipelineSim h1 = run(ScheduleKind::ZbH1, pp, m, tf, tb, tw);
    // chunks of half a stage: half the times
    const PipelineSim v = run(ScheduleKind::ZbV, pp, m, tf / 2, tb / 2, tw / 2);
    ASSERT_TRUE(ref.completed && h1.completed && v.completed);
    EXPECT_LT(mean_idle(h1), mean_idle(ref) * 0.6) << pp;
    EXPECT_LT(mean_idle(v), mean_idle(h1)) << pp;
    // ZB-H1's idle is at least the fill (pp - 1)(T_F + T_B) less what the held Ws can cover.
    EXPECT_GE(mean_idle(h1) + 1e-12, (pp - 1) * (tf + tb - tw) - 1e-9);
  }
}

TEST(ZeroBubble, VPlacement) {
  // rank s holds model chunks s and 2p - 1 - s: the first and last on rank 0, the turn on p - 1
  for (int pp = 2; pp <= 8; ++pp)
    for (int k = 0; k < 2 * pp; ++k) {
      const ChunkAt at = chunk_at(pp, k, ChunkPlacement::VShape);
      EXPECT_EQ(model_chunk(pp, at.stage, at.chunk, ChunkPlacement::VShape), k);
    }
  EXPECT_EQ(model_chunk(4, 0, 1, ChunkPlacement::VShape), 7);
  EXPECT_EQ(model_chunk(4, 3, 1, ChunkPlacement::VShape), 4);
  EXPECT_EQ(placement_of(ScheduleKind::ZbV), ChunkPlacement::VShape);
  EXPECT_EQ(placement_of(ScheduleKind::ZbH1), ChunkPlacement::Interleaved);
  // the chunk-1 B of the last stage waits for its own chunk-1 F, and chunk 0's F of the last
  // stage feeds its own chunk 1
  const Producer p = producer_of({Op::Forward, 0, 1}, 3, 4, 2, ChunkPlacement::VShape);
  EXPECT_EQ(p.rank, 3);
  EXPECT_EQ(p.action, (Action{Op::Forward, 0, 0}));
  EXPECT_EQ(producer_of({Op::BackwardInput, 0, 1}, 0, 4, 2, ChunkPlacement::VShape).rank, -1);
  EXPECT_EQ(producer_of({Op::BackwardInput, 2, 0}, 1, 4, 2, ChunkPlacement::VShape).action,
            (Action{Op::BackwardInput, 2, 0}));
  EXPECT_EQ(producer_of({Op::BackwardWeight, 2, 0}, 1, 4, 2, ChunkPlacement::VShape).rank, -1);
  // the V's own table: stage 0 of 2 with 4 microbatches starts with 3 chunk-0 forwards
  const auto a = make_zb_v(2, 0, 4);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(a[i], (Action{Op::Forward, i, 0}));
  EXPECT_EQ(a[3], (Action{Op::Forward, 0, 1}));
  EXPECT_EQ(a[4], (Action{Op::BackwardInput, 0, 1}));
  EXPECT_EQ(a[5], (Action{Op::BackwardWeight, 0, 1}));
}

namespace {
std::string message_of(ScheduleKind kind, int pp, int v) {
  try {
    check_virtual_stages(kind, pp, 4, v);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(ZeroBubble, ClearMessages) {
  EXPECT_NE(message_of(ScheduleKind::ZbV, 2, 1).find("the zb-v schedule needs 2 model chunks per rank, not 1"),
            std::string::npos) << message_of(ScheduleKind::ZbV, 2, 1);
  EXPECT_NE(message_of(ScheduleKind::ZbV, 2, 3).find("the zb-v schedule needs 2 model chunks per rank, not 3"), std::string::npos);
  EXPECT_NE(message_of(ScheduleKind::ZbH1, 1, 1).find("the zb-h1 schedule needs at least 2 pipeline stages, not 1"),
            std::string::npos);
  EXPECT_NE(message_of(ScheduleKind::ZbV, 1, 2).find("the zb-v schedule needs at least 2 pipeline stages, not 1"), std::string::npos);
  EXPECT_NE(message_of(ScheduleKind::ZbH1, 2, 2).find("the zb-h1 schedule runs 1 model chunk per rank, not 2"), std::string::npos);
  EXPECT_EQ(message_of(ScheduleKind::ZbV, 4, 2), "");
  EXPECT_EQ(message_of(ScheduleKind::ZbH1, 4, 1), "");
  try {
    check_v_split(2, 6);
    FAIL() << "depth 6 into 4 chunks";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("the zb-v schedule needs the 6 blocks to split evenly into 2 x 2 pipeline stages = 4 chunks"), std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(check_v_split(2, 8));
  EXPECT_EQ(parse_schedule("zb-h1"), ScheduleKind::ZbH1);
  EXPECT_EQ(parse_schedule("zb-v"), ScheduleKind::ZbV);
  try {
    parse_schedule("zb-h2");
    FAIL();
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("1f1b, gpipe, zb-h1 or zb-v"), std::string::npos) << e.what();
  }
}

}  // namespace dit

namespace dit {

// The op times measured on this code's CPU backend (accounting.json op_forward_s, op_backward_s,
// op_weight_s at pp 2, the 8-block width-128 model of docs/study_bubble/zero_bubble: about
// T_F : T_B : T_W = 1 : 1.2 : 0.95). The simulated bubble at pp 2: ZB-H1 at most half of 1F1B's and
// ZB-V at most half of interleaved 1F1B's (v 2) for every m >= 2 (m = 1 has nothing to fill).
TEST(ZeroBubble, MeasuredOpTimesAtPp2) {
  const double tf = 1.0, tb = 1.2, tw = 0.95;
  const int pp = 2;
  for (int m : {1, 2, 4, 8}) {
    std::vector<std::vector<Action>> f1b, il;
    for (int s = 0; s < pp; ++s) f1b.push_back(make_1f1b(pp, s, m)), il.push_back(make_interleaved(pp, s, m, 2));
    const double b1 = simulate_pipeline(
        f1b, 1, [&](int, const Action& a) { return a.op == Op::Forward ? tf : tb + tw; }, no_link).bubble();
    const double bi = simulate_pipeline(
        il, 2, [&](int, const Action& a) { return a.op == Op::Forward ? tf / 2 : (tb + tw) / 2; }, no_link).bubble();
    const double bh = run(ScheduleKind::ZbH1, pp, m, tf, tb, tw).bubble();
    const double bv = run(ScheduleKind::ZbV, pp, m, tf / 2, tb / 2, tw / 2).bubble();
    std::printf("[ pp 2 m %d ] simulated bubble 1f1b %.1f%% zb-h1 %.1f%% interleaved %.1f%% zb-v %.1f%%\n", m,
                100 * b1, 100 * bh, 100 * bi, 100 * bv);
    EXPECT_LT(bh, b1);
    EXPECT_LT(bv, bi);
    if (m >= 2) {
      EXPECT_LE(bh, 0.5 * b1) << m;
      EXPECT_LE(bv, 0.5 * bi) << m;
    }
  }
}

}  // namespace dit
