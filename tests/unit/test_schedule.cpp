// Pipeline schedules are data: checked here without any communication, for every
// (pp, stage, microbatches) up to 8 x 8 x 16, and interleaved 1F1B for every pp <= 8, v <= 4,
// m <= 4 pp (multiples of pp or not): complete, ordered, bounded, and deadlock-free across ranks.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "parallel/pipeline_schedule.h"
#include "parallel/schedule_sim.h"

namespace dit {

namespace {
// Every microbatch runs forward once and backward once, backward after forward.
void expect_complete(const std::vector<Action>& a, int m) {
  std::vector<int> f(m, -1), b(m, -1);
  for (int i = 0; i < static_cast<int>(a.size()); ++i) {
    ASSERT_GE(a[i].microbatch, 0);
    ASSERT_LT(a[i].microbatch, m);
    auto& slot = a[i].op == Op::Forward ? f : b;
    ASSERT_EQ(slot[a[i].microbatch], -1) << "microbatch " << a[i].microbatch << " twice";
    slot[a[i].microbatch] = i;
  }
  for (int mb = 0; mb < m; ++mb) {
    ASSERT_GE(f[mb], 0);
    ASSERT_GT(b[mb], f[mb]) << "backward of " << mb << " before its forward";
  }
}
}  // namespace

TEST(Schedule, OneFOneBOrderCountsAndMemory) {
  for (int pp = 1; pp <= 8; ++pp)
    for (int s = 0; s < pp; ++s)
      for (int m = 1; m <= 16; ++m) {
        const auto a = make_1f1b(pp, s, m);
        ASSERT_EQ(static_cast<int>(a.size()), 2 * m);
        expect_complete(a, m);
        // Megatron: warmup = min(pp - s - 1, m) forwards, then alternate, then drain.
        const int warmup = std::min(pp - s - 1, m);
        for (int i = 0; i < warmup; ++i) EXPECT_EQ(a[i], (Action{Op::Forward, i}));
        for (int k = 0; k < m - warmup; ++k) {
          EXPECT_EQ(a[warmup + 2 * k], (Action{Op::Forward, warmup + k}));
          EXPECT_EQ(a[warmup + 2 * k + 1], (Action{Op::Backward, k}));
        }
        for (int k = 0; k < warmup; ++k)
          EXPECT_EQ(a[warmup + 2 * (m - warmup) + k], (Action{Op::Backward, m - warmup + k}));
        // Forwards and backwards each run in microbatch order.
        int nf = 0, nb = 0;
        for (const Action& x : a) EXPECT_EQ(x.microbatch, x.op == Op::Forward ? nf++ : nb++);
        // At most pp - s activations in flight (and never more than m).
        EXPECT_LE(max_in_flight(a), std::min(pp - s, m));
        EXPECT_EQ(max_in_flight(a), std::min(pp - s, m));
      }
}

TEST(Schedule, GPipeAllForwardsThenAllBackwards) {
  for (int pp = 1; pp <= 8; ++pp)
    for (int s = 0; s < pp; ++s)
      for (int m = 1; m <= 16; ++m) {
        const auto a = make_gpipe(pp, s, m);
        expect_complete(a, m);
        for (int i = 0; i < m; ++i) EXPECT_EQ(a[i], (Action{Op::Forward, i}));
        for (int i = 0; i < m; ++i) EXPECT_EQ(a[m + i], (Action{Op::Backward, i}));
        EXPECT_EQ(max_in_flight(a), m);
      }
}

TEST(Schedule, LastStageAlternatesAndForwardOnlyHasNoBackward) {
  const auto a = make_1f1b(4, 3, 3);
  const std::vector<Action> want = {{Op::Forward, 0}, {Op::Backward, 0}, {Op::Forward, 1},
                                    {Op::Backward, 1}, {Op::Forward, 2}, {Op::Backward, 2}};
  EXPECT_EQ(a, want);
  const auto f = make_forward_only(5);
  ASSERT_EQ(f.size(), 5u);
  for (const Action& x : f) EXPECT_EQ(x.op, Op::Forward);
  EXPECT_DOUBLE_EQ(theoretical_bubble(4, 8), 3.0 / 11.0);
  EXPECT_DOUBLE_EQ(theoretical_bubble(1, 8), 0.0);
}

TEST(Schedule, BadArgumentsAndNames) {
  EXPECT_THROW(make_1f1b(2, 2, 4), std::exception);
  EXPECT_THROW(make_1f1b(2, 0, 0), std::exception);
  EXPECT_EQ(parse_schedule("gpipe"), ScheduleKind::GPipe);
  EXPECT_EQ(parse_schedule("1f1b"), ScheduleKind::OneFOneB);
  EXPECT_THROW(parse_schedule("interleaved-zb"), std::exception);
}

namespace {
std::vector<std::vector<Action>> interleaved_lists(int pp, int m, int v) {
  std::vector<std::vector<Action>> l;
  for (int s = 0; s < pp; ++s) l.push_back(make_interleaved(pp, s, m, v));
  return l;
}
double unit_cost(int, const Action& a) { return a.op == Op::Forward ? 1.0 : 2.0; }
double no_link(int, const Action&) { return 0.0; }
}  // namespace

// Every (chunk, microbatch) runs forward once and backward once, backward after forward; the
// warmup is Megatron's (with the last group's length for m not a multiple of pp); in flight at
// most warmup + 1 chunk-microbatches.
TEST(Interleaved, CompleteOrderedAndBounded) {
  for (int pp = 2; pp <= 8; ++pp)
    for (int v = 2; v <= 4; ++v)
      for (int m = 1; m <= 4 * pp; ++m)
        for (int s = 0; s < pp; ++s) {
          const auto a = make_interleaved(pp, s, m, v);
          ASSERT_EQ(static_cast<int>(a.size()), 2 * m * v);
          std::vector<int> f(m * v, -1), b(m * v, -1);
          for (int i = 0; i < static_cast<int>(a.size()); ++i) {
            ASSERT_TRUE(a[i].chunk >= 0 && a[i].chunk < v && a[i].microbatch >= 0 && a[i].microbatch < m);
            auto& slot = a[i].op == Op::Forward ? f : b;
            const int k = a[i].chunk * m + a[i].microbatch;
            ASSERT_EQ(slot[k], -1) << "pp " << pp << " v " << v << " m " << m << ": twice";
            slot[k] = i;
          }
          for (int k = 0; k < m * v; ++k) ASSERT_GT(b[k], f[k]) << "backward before forward";
          const int last_group = m < pp ? m : pp + m % pp;
          const int warmup = std::min(m * v, (pp - s - 1) * 2 + (v - 1) * last_group);
          for (int i = 0; i < warmup; ++i) ASSERT_EQ(a[i].op, Op::Forward);
          EXPECT_LE(max_in_flight(a), std::min(m * v, warmup + 1));
          // A microbatch visits this rank's chunks in order forward and in reverse backward.
          for (int mb = 0; mb < m; ++mb)
            for (int c = 1; c < v; ++c) {
              EXPECT_LT(f[(c - 1) * m + mb], f[c * m + mb]);
              EXPECT_GT(b[(c - 1) * m + mb], b[c * m + mb]);
            }
        }
}

// Megatron's table when m is a multiple of pp: forwards in groups of pp microbatches, chunk by
// chunk; backwards likewise with the chunks reversed.
TEST(Interleaved, MegatronOrderForMultiplesOfPp) {
  const int pp = 4, v = 2, m = 8, s = 1;
  const auto a = make_interleaved(pp, s, m, v);
  std::vector<Action> fwd, bwd;
  for (const Action& x : a) (x.op == Op::Forward ? fwd : bwd).push_back(x);
  for (int k = 0; k < m * v; ++k) {
    const int group = k / (pp * v), in = k % (pp * v);
    EXPECT_EQ(fwd[k], (Action{Op::Forward, group * pp + in % pp, in / pp})) << k;
    EXPECT_EQ(bwd[k], (Action{Op::Backward, group * pp + in % pp, v - 1 - in / pp})) << k;
  }
  // warmup (pp - s - 1) * 2 + (v - 1) * pp = 8 forwards, then alternate.
  for (int i = 0; i < 8; ++i) EXPECT_EQ(a[i].op, Op::Forward);
  EXPECT_EQ(a[8].op, Op::Forward);
  EXPECT_EQ(a[9], (Action{Op::Backward, 0, 1}));
  EXPECT_EQ(make_interleaved(4, 2, 8, 1), make_1f1b(4, 2, 8));
  EXPECT_EQ(make_pipeline_schedule(ScheduleKind::OneFOneB, 4, 2, 8, 2), make_interleaved(4, 2, 8, 2));
}

// Across ranks: each rank runs its list in order and an action waits for its input from the
// neighbouring rank (wrapping around between the last stage and stage 0). The executor never
// waits for anything else: sends do not block, and a gradient's receive is posted right after its
// forward, so reusing a slot never waits on a receiver (pipeline.h). Every list set completes.
TEST(Interleaved, NoDeadlockAcrossRanks) {
  for (int pp = 2; pp <= 8; ++pp)
    for (int v = 1; v <= 4; ++v)
      for (int m = 1; m <= 4 * pp; ++m) {
        const PipelineSim sim = simulate_pipeline(interleaved_lists(pp, m, v), v, unit_cost, no_link);
        EXPECT_TRUE(sim.completed) << "pp " << pp << " v " << v << " m " << m;
      }
  // Forward only (sampling): slots are freed at once, so each forward reuses the slot of the one
  // before and waits until that one's message has a posted receive (rendezvous sends).
  auto forward_only_completes = [](const std::vector<std::vector<Action>>& l, int v) {
    const int pp = static_cast<int>(l.size());
    std::vector<std::size_t> pos(pp, 0);
    std::vector<long> posted(pp, -1);  // the last action whose receive this rank has posted
    auto index_of = [&](int r, const Action& a) {
      return static_cast<std::size_t>(std::find(l[r].begin(), l[r].end(), a) - l[r].begin());
    };
    auto consumer = [&](int r, const Action& a) {  // (rank, index) fed by a, or rank -1
      const int k = a.chunk * pp + r;
      if (k == pp * v - 1) return std::pair<int, std::size_t>{-1, 0};
      const int cr = (k + 1) % pp;
      return std::pair<int, std::size_t>{cr, index_of(cr, {Op::Forward, a.microbatch, (k + 1) / pp})};
    };
    for (bool moved = true; moved;) {
      moved = false;
      for (int r = 0; r < pp; ++r)
        for (; pos[r] < l[r].size(); ++pos[r], moved = true) {
          const Action& a = l[r][pos[r]];
          if (posted[r] < static_cast<long>(pos[r])) {  // acquire the slot, then post the receive
            if (pos[r] > 0) {
              const auto [cr, ci] = consumer(r, l[r][pos[r] - 1]);
              if (cr >= 0 && posted[cr] < static_cast<long>(ci)) break;  // its send still waits
            }
            posted[r] = static_cast<long>(pos[r]);
            moved = true;
          }
          const Producer p = producer_of(a, r, pp, v);
          if (p.rank >= 0 && pos[p.rank] <= index_of(p.rank, p.action)) break;
        }
    }
    for (int r = 0; r < pp; ++r)
      if (pos[r] < l[r].size()) return false;
    return true;
  };
  for (int pp = 2; pp <= 8; ++pp)
    for (int v = 1; v <= 4; ++v)
      for (int m = 1; m <= 2 * pp + 1; ++m) {
        std::vector<std::vector<Action>> fwd(pp, make_forward_only(m, pp, v));
        EXPECT_TRUE(forward_only_completes(fwd, v)) << "forward only pp " << pp << " v " << v << " m " << m;
      }
  // ... and has teeth: chunk by chunk (the training order) deadlocks forward only.
  std::vector<std::vector<Action>> by_chunk(2);
  for (int c = 0; c < 2; ++c)
    for (int mb = 0; mb < 2; ++mb)
      for (auto& l : by_chunk) l.push_back({Op::Forward, mb, c});
  EXPECT_FALSE(forward_only_completes(by_chunk, 2));
  // The simulation has teeth: rank 1 running its chunk 1 first waits forever.
  auto bad = interleaved_lists(2, 2, 2);
  std::stable_partition(bad[1].begin(), bad[1].end(), [](const Action& a) { return a.chunk == 1; });
  EXPECT_FALSE(simulate_pipeline(bad, 2, unit_cost, no_link).completed);
}

// With equal chunk times (backward = 2 x forward) and free links, the simulated idle share is
// (pp - 1) / (v m + pp - 1) for m a multiple of pp, for 1F1B (v = 1) and interleaved alike.
TEST(Interleaved, SimulatedBubbleIsTheFormula) {
  for (int pp = 2; pp <= 6; ++pp)
    for (int v = 1; v <= 3; ++v)
      for (int m = pp; m <= 3 * pp; m += pp) {
        const auto sim = simulate_pipeline(interleaved_lists(pp, m, v), v, unit_cost, no_link);
        ASSERT_TRUE(sim.completed);
        // every rank busy 3 m v (a chunk is 1/v of a stage: scale does not matter for the share)
        EXPECT_NEAR(sim.bubble(), theoretical_bubble(pp, m, v), 1e-12) << pp << " " << v << " " << m;
      }
  EXPECT_DOUBLE_EQ(theoretical_bubble(4, 8, 2), 3.0 / 19.0);
}

TEST(Interleaved, ClearMessages) {
  try {
    make_pipeline_schedule(ScheduleKind::GPipe, 2, 0, 4, 2);
    FAIL() << "gpipe with virtual stages";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("2 model chunks per rank need the 1f1b schedule (interleaved 1F1B), not gpipe"),
              std::string::npos) << e.what();
  }
  EXPECT_THROW(make_interleaved(1, 0, 4, 2), std::exception);
  EXPECT_THROW(make_interleaved(2, 0, 4, 0), std::exception);
}

}  // namespace dit

