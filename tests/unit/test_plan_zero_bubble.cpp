// `dit_mp plan` counts what a zero-bubble schedule keeps: the plan runs the trainer's own step, so
// each stage's activations include the tensors its held Ws read (ZB-H1's stage s holds s of them)
// and ZB-V's two chunks; the F/B order and everything else is 1F1B's. A held W's output grads are
// moved into the forward tensors they are the grads of, so a zero-bubble rank's peak stays within
// 5% of 1F1B's (without recomputation, outside sequence parallelism: dit_block.cpp).
#include <gtest/gtest.h>

#include "io/config.h"
#include "plan/planner.h"

namespace dit {
namespace {

LayoutPlan plan_with(ScheduleKind kind, int v, int microbatches = 0) {
  RunConfig c = RunConfig::demo();
  c.model.dit.depth = 4;
  c.parallel.tp = 1, c.parallel.pp = 2, c.parallel.schedule = kind, c.parallel.virtual_stages = v;
  if (microbatches) c.train.micro_batch = static_cast<int>(c.train.global_batch / microbatches);
  return plan_config(c, {1, 2, 1});
}

TEST(ZeroBubblePlan, CountsTheTensorsKeptUntilW) {
  const LayoutPlan f1b = plan_with(ScheduleKind::OneFOneB, 1), h1 = plan_with(ScheduleKind::ZbH1, 1);
  ASSERT_EQ(h1.stages.size(), 2u);
  // stage 0 runs W right after B (as 1F1B's fused backward); stage 1 holds one W back
  EXPECT_GE(h1.stages[0].mem.activations, f1b.stages[0].mem.activations);
  EXPECT_GT(h1.stages[1].mem.activations, f1b.stages[1].mem.activations);
  EXPECT_EQ(h1.stages[1].pp_bytes, f1b.stages[1].pp_bytes);
  const LayoutPlan zv = plan_with(ScheduleKind::ZbV, 2);
  EXPECT_EQ(zv.virtual_stages, 2);
  for (const StagePlan& s : zv.stages) EXPECT_GT(s.mem.activations, 0u);
  EXPECT_EQ(zv.stages[0].blocks + zv.stages[1].blocks, 4);
}

// The paper's claim for ZB-H1: 1F1B's peak. Stage 0 runs each W right after its B, so it holds what
// 1F1B holds; stage 1 holds one W's tensors in place of a second microbatch in flight. ZB-V keeps no
// more than interleaved 1F1B at the same v.
TEST(ZeroBubblePlan, PeakWithinFivePercentOf1F1B) {
  for (int m : {2, 8}) {
    SCOPED_TRACE("microbatches " + std::to_string(m));
    const LayoutPlan f1b = plan_with(ScheduleKind::OneFOneB, 1, m), h1 = plan_with(ScheduleKind::ZbH1, 1, m);
    EXPECT_LE(double(h1.peak_bytes()), 1.05 * double(f1b.peak_bytes()));
    EXPECT_LE(double(h1.stages[0].mem.activations), 1.05 * double(f1b.stages[0].mem.activations));
    const LayoutPlan il = plan_with(ScheduleKind::OneFOneB, 2, m), zv = plan_with(ScheduleKind::ZbV, 2, m);
    EXPECT_LE(double(zv.peak_bytes()), 1.05 * double(il.peak_bytes()));
  }
}

}  // namespace
}  // namespace dit
