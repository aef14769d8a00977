// The run monitor's own rules (run/monitor.h): the loss spike watch and the split of a pipeline
// rank's wait into the bubble and exposed communication. The gathered rows, ranks.jsonl and
// TensorBoard are tested on real runs (tests/cli/tensorboard.sh, profile.sh).
#include <gtest/gtest.h>

#include <cmath>

#include "engine/loss_spike.h"
#include "run/monitor.h"

namespace dit {
namespace {

TEST(LossSpikeWatch, NamesALossFarAboveTheRecentOnes) {
  LossSpikeWatch watch(6.0, 50);
  // A noisy, slowly falling loss: nothing is a spike.
  for (int i = 0; i < 200; ++i) {
    const double loss = 1.0 - 0.001 * i + 0.01 * std::sin(1.7 * i);
    EXPECT_EQ(watch.check(i + 1, loss), "") << "step " << i + 1;
  }
  const std::string line = watch.check(201, 1.5);
  EXPECT_NE(line.find("loss spike at step 201: 1.5 is"), std::string::npos) << line;
  EXPECT_NE(line.find("train.loss_spike_z = 6"), std::string::npos) << line;
  // NaN is the non-finite rule's, not a spike; a watch at 0 is off.
  EXPECT_EQ(watch.check(202, NAN), "");
  LossSpikeWatch off(0.0);
  for (int i = 0; i < 60; ++i) off.check(i + 1, 1.0 + 0.001 * (i % 2));
  EXPECT_EQ(off.check(61, 100.0), "");
}

TEST(LossSpikeWatch, WaitsForHalfAWindow) {
  LossSpikeWatch watch(3.0, 20);
  for (int i = 0; i < 9; ++i) watch.check(i + 1, 1.0 + 0.01 * (i % 3));
  EXPECT_EQ(watch.check(10, 50.0), "") << "nine losses are not yet half of a window of 20";
  LossSpikeWatch ready(3.0, 20);
  for (int i = 0; i < 10; ++i) ready.check(i + 1, 1.0 + 0.01 * (i % 3));
  EXPECT_NE(ready.check(11, 50.0), "");
}

TEST(SplitPipelineWait, TheScheduleIdleIsTheBubbleAndTheRestExposed) {
  TrainConfig train;  // 1F1B, one chunk
  const int pp = 4, m = 8;
  const std::vector<double> f(pp, 1.0), b(pp, 2.0), w(pp, 0.0);
  // At equal op times 1F1B idles (pp - 1)(T_F + T_B) = 9 per stage.
  const double ideal = (pp - 1) * 3.0;
  std::vector<double> idle = {ideal + 0.5, ideal, 2.0, 0.0};
  const std::vector<StageWait> got = split_pipeline_wait(train, pp, m, f, b, w, idle);
  ASSERT_EQ(got.size(), 4u);
  EXPECT_NEAR(got[0].bubble, ideal, 1e-12);
  EXPECT_NEAR(got[0].exposed, 0.5, 1e-12);
  EXPECT_NEAR(got[1].bubble, ideal, 1e-12);
  EXPECT_NEAR(got[1].exposed, 0.0, 1e-12);
  EXPECT_NEAR(got[2].bubble, 2.0, 1e-12) << "never more bubble than the rank waited";
  EXPECT_NEAR(got[3].bubble + got[3].exposed, 0.0, 1e-12);
  // At pp 1 every wait is exposed (the dp group's, as the monitor files it).
  const std::vector<StageWait> one = split_pipeline_wait(train, 1, m, {1.0}, {2.0}, {0.0}, {0.25});
  EXPECT_EQ(one[0].bubble, 0.0);
  EXPECT_EQ(one[0].exposed, 0.25);
}

}  // namespace
}  // namespace dit
