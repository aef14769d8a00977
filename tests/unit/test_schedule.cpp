// Pipeline schedules are data: checked here without any communication, for every
// (pp, stage, microbatches) up to 8 x 8 x 16.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "parallel/schedule.h"

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

}  // namespace dit
