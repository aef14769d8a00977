// Single-rank training: the loss falls on a small synthetic dataset, and two identical runs give
// bit-identical losses.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "app/trainer.h"
#include "backend/cpu/cpu_backend.h"
#include "tiny_model.h"

namespace dit {

namespace {
std::vector<double> run_losses(int steps) {
  CpuBackend be;
  SyntheticDataset data({1, 8, 8}, 4, 256, 7);
  TrainConfig tc;
  tc.global_batch = 16;
  tc.micro_batch = 8;  // two microbatches: exercises gradient accumulation
  tc.steps = steps;
  tc.adamw.lr = 2e-3;
  tc.grad_clip = 1.0;
  tc.seed = 11;
  ParallelContext ctx = make_single_context();
  Trainer trainer(be, ctx, tiny_dit(1, 2, 2, 4), tc, data);
  std::vector<double> losses;
  for (int i = 0; i < steps; ++i) losses.push_back(trainer.step().loss);
  return losses;
}

double mean(const std::vector<double>& v, std::size_t begin, std::size_t end) {
  return std::accumulate(v.begin() + begin, v.begin() + end, 0.0) / double(end - begin);
}
}  // namespace

TEST(Trainer, LossFallsOnSyntheticData) {
  const auto losses = run_losses(300);
  const double first = mean(losses, 0, 30), last = mean(losses, 270, 300);
  std::printf("mean loss: steps 0-29 %.4f, steps 270-299 %.4f\n", first, last);
  for (double l : losses) ASSERT_TRUE(std::isfinite(l));
  EXPECT_LT(last, 0.6 * first);
}

TEST(Trainer, SameRunTwiceIsBitIdentical) {
  const auto a = run_losses(20), b = run_losses(20);
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << "step " << i;
  EXPECT_NE(a.front(), a.back());
}

}  // namespace dit
