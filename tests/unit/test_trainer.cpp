// Single-rank training: the loss falls on a small synthetic dataset, and two identical runs give
// bit-identical losses.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "engine/trainer.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/timed_backend.h"
#include "io/dataset.h"
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

namespace dit {

// The host waits for the backend a fixed number of times per step, however many microbatches and
// parameter tensors: the norm's one reduction and the loss terms' one download. A download per
// microbatch (the loss on the host) or a reduction per tensor (the norm) would make the counts
// differ below. The CPU backend counts the sync points a GPU has.
TEST(Trainer, HostWaitsTwicePerStepWhateverTheMicrobatchesAndTensors) {
  SyntheticDataset data({1, 8, 8}, 4, 256, 7);
  auto syncs = [&](int depth, int micro, DType dt) {
    auto be = make_backend("cpu", dt);
    ParallelContext ctx = make_single_context();
    TrainConfig tc;
    tc.global_batch = 8;
    tc.micro_batch = micro;
    tc.seed = 2;
    Trainer t(*be, ctx, tiny_dit(1, depth, 2, 4), tc, data);
    t.step();  // the first step may set things up
    std::vector<std::uint64_t> per_step;
    for (int i = 0; i < 2; ++i) {
      const std::uint64_t before = be->host_syncs();
      t.step();
      per_step.push_back(be->host_syncs() - before);
    }
    EXPECT_EQ(per_step[0], per_step[1]);
    return per_step[0];
  };
  for (DType dt : {DType::F32, DType::BF16}) {
    const std::uint64_t base = syncs(2, 8, dt);
    EXPECT_EQ(base, 2u) << dtype_name(dt);
    EXPECT_EQ(syncs(2, 1, dt), base) << "8 microbatches instead of 1, " << dtype_name(dt);
    EXPECT_EQ(syncs(4, 2, dt), base) << "twice the blocks and 4 microbatches, " << dtype_name(dt);
  }
}

}  // namespace dit

namespace dit {

// The timing wrapper of the GPU check changes no number, and its split of a step is sane: time
// inside primitives is positive and below the step's span.
TEST(Trainer, TimedBackendChangesNothingAndSplitsTheStep) {
  SyntheticDataset data({1, 8, 8}, 4, 256, 7);
  TrainConfig tc;
  tc.global_batch = 8;
  tc.micro_batch = 4;
  auto losses = [&](bool timed_on) {
    CpuBackend be;
    TimedBackend timed(be);
    ParallelContext ctx = make_single_context();
    Trainer t(timed, ctx, tiny_dit(1, 2, 2, 4), tc, data);
    std::vector<double> out;
    for (int i = 0; i < 3; ++i) {
      if (timed_on) timed.reset();
      out.push_back(t.step().loss);
      if (timed_on) {
        const double k = timed.kernel_seconds(), span = timed.span_seconds();
        EXPECT_GT(k, 0.0);
        EXPECT_LE(k, span);
      }
    }
    return out;
  };
  EXPECT_EQ(losses(true), losses(false));
}

}  // namespace dit
