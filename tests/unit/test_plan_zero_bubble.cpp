// `dit_mp plan` counts what a zero-bubble schedule keeps: the plan runs the trainer's own step, so
// each stage's activations include the tensors its held Ws read (ZB-H1's stage s holds s of them)
// and ZB-V's two chunks; the F/B order and everything else is 1F1B's.
#include <gtest/gtest.h>

#include "io/config.h"
#include "plan/planner.h"

namespace dit {
namespace {

LayoutPlan plan_with(ScheduleKind kind, int v) {
  RunConfig c = RunConfig::demo();
  c.model.dit.depth = 4;
  c.parallel.tp = 1, c.parallel.pp = 2, c.parallel.schedule = kind, c.parallel.virtual_stages = v;
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

}  // namespace
}  // namespace dit
