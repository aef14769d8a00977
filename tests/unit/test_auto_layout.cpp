// The layout search behind `plan --fit` and `train --layout auto`: constraints pin their setting,
// the schedules and virtual stages are searched, nothing fitting names the smallest peak, a world
// size no layout divides names those that some layout does, and the choice lands in the config.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "core/error.h"
#include "plan/auto_layout.h"
#include "backend/cpu/cpu_backend.h"
#include "io/checkpoint.h"
#include "io/h5.h"
#include "plan/planner.h"
#include "tiny_model.h"

namespace dit {
namespace {

RunConfig tiny_config() {
  RunConfig c;
  c.model.dit = tiny_dit(1, 4, 4, 10);
  c.train.global_batch = 8;
  c.train.micro_batch = 2;
  c.parallel.layout = LayoutMode::Auto;
  c.sample.per_class = 1;
  c.sample.num_steps = 2;
  c.validate();
  return c;
}

FitRequest tiny_request(int gpus, double gib) {
  FitRequest req;
  req.cfg = tiny_config();
  req.hw = find_hardware("cpu");
  req.hw.memory_gib = gib;
  req.gpus = gpus;
  req.precisions = {DType::F32};
  return req;
}

TEST(FitSearch, ConstraintsPinTheirSettingsAndTheRestIsSearched) {
  FitRequest req = tiny_request(4, 1);
  const FitSearch free = fit_search(req);
  ASSERT_FALSE(free.rows.empty());
  std::set<int> tps, vs;
  std::set<ScheduleKind> schedules;
  for (const FitRow& r : free.rows) {
    tps.insert(r.plan.layout.tp);
    vs.insert(r.plan.virtual_stages);
    schedules.insert(r.plan.schedule);
  }
  EXPECT_EQ(tps, (std::set<int>{1, 2, 4}));
  EXPECT_TRUE(vs.count(2)) << "pp 2 over 4 blocks allows 2 virtual stages";
  EXPECT_TRUE(schedules.count(ScheduleKind::GPipe));
  req.fixed.tp = 2;
  req.fixed.recompute = Recompute::Selective;
  const FitSearch pinned = fit_search(req);
  ASSERT_FALSE(pinned.rows.empty());
  for (const FitRow& r : pinned.rows) {
    EXPECT_EQ(r.plan.layout.tp, 2);
    EXPECT_EQ(r.plan.recompute, Recompute::Selective);
  }
  EXPECT_LT(pinned.rows.size(), free.rows.size());
  for (std::size_t i = 1; i < free.rows.size(); ++i) EXPECT_LE(free.rows[i - 1].time.step_s, free.rows[i].time.step_s);
}

// What the search may choose of the sharding: levels 1-3 on the CPU backend, level 1 for a GPU
// (the CUDA backend cannot hand memory back yet, so a top row of level 2 or 3 would be refused
// there) unless the level is pinned; offload only where the host's memory is not the device's.
TEST(FitSearch, ShardingSearchedWhereItRuns) {
  FitRequest cpu = tiny_request(4, 1);
  search_sharding(cpu, false);
  EXPECT_EQ(cpu.zeros, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(cpu.offloads, (std::vector<bool>{false}));
  FitRequest gpu = tiny_request(4, 1);
  gpu.hw = find_hardware("a100-80g");
  search_sharding(gpu, false);
  EXPECT_EQ(gpu.zeros, (std::vector<int>{1}));
  EXPECT_EQ(gpu.offloads, (std::vector<bool>{false, true}));
  gpu.fixed.zero = 3;
  search_sharding(gpu, false);
  EXPECT_EQ(gpu.zeros, (std::vector<int>{3}));
  FitRequest cuda_run = tiny_request(4, 1);
  search_sharding(cuda_run, true);
  EXPECT_EQ(cuda_run.zeros, (std::vector<int>{1}));
  const FitSearch s = fit_search(gpu);
  ASSERT_FALSE(s.rows.empty());
  for (const FitRow& r : s.rows) EXPECT_EQ(r.plan.zero, 3);
}

TEST(FitSearch, NothingFittingKeepsTheSmallestPeak) {
  const FitSearch s = fit_search(tiny_request(2, 1e-6));
  EXPECT_TRUE(s.rows.empty());
  ASSERT_TRUE(s.smallest.has_value());
  EXPECT_GT(s.candidates, 0);
  const FitSearch all = fit_search(tiny_request(2, 1));
  std::size_t smallest = SIZE_MAX;
  for (const FitRow& r : all.rows) smallest = std::min(smallest, r.plan.peak_bytes());
  EXPECT_EQ(s.smallest->plan.peak_bytes(), smallest);
}

TEST(AutoLayout, RefusalsNameWhatWouldFit) {
  AutoLayoutRequest r;
  r.cfg = tiny_config();
  r.cfg.parallel.hardware = "cpu";
  r.cfg.parallel.memory_gib = 1e-6;
  r.world = 2;
  try {
    choose_layout(r);
    FAIL() << "nothing fits 1e-6 GiB";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the smallest peak found is"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("1e-06 GiB per rank"), std::string::npos) << e.what();
  }
  r.cfg.parallel.memory_gib = 1;
  r.world = 5;  // tp divides 4 heads, pp <= 4 blocks, dp divides 8 images: no factor 5 anywhere
  try {
    choose_layout(r);
    FAIL() << "no layout divides 5 ranks";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("run with 1, 2, 3, 4, 6, 8"), std::string::npos) << e.what();
  }
  r.cfg.parallel.hardware = "tpu";
  EXPECT_THROW(choose_layout(r), Error);
}

TEST(AutoLayout, TheChoiceLandsInTheConfigAndIsRecognizedOnResume) {
  AutoLayoutRequest r;
  r.cfg = tiny_config();
  r.cfg.parallel.hardware = "cpu";
  r.cfg.parallel.memory_gib = 1;
  r.world = 4;
  const AutoLayoutChoice c = choose_layout(r);
  RunConfig chosen = r.cfg;
  apply_layout(chosen, c.search.rows[0].plan);
  EXPECT_EQ(chosen.parallel.tp, c.search.rows[0].plan.layout.tp);
  EXPECT_EQ(chosen.train.micro_batch, c.search.rows[0].plan.micro_batch);
  const RunConfig back = RunConfig::from_toml(chosen.to_toml(), "config.toml");
  EXPECT_EQ(back, chosen);
  std::string why;
  EXPECT_TRUE(recorded_layout_fits(back, r, &why)) << why;
  r.world = 9;  // dp would not divide the 8 images
  EXPECT_FALSE(recorded_layout_fits(back, r, &why));
  r.world = 4;
  r.fixed.tp = back.parallel.tp == 1 ? 2 : 1;
  EXPECT_FALSE(recorded_layout_fits(back, r, &why));
  EXPECT_NE(why.find("exclude it"), std::string::npos) << why;
}

}  // namespace
}  // namespace dit

namespace dit {

// What plan counts a rank holding while it saves a checkpoint (16 bytes a parameter: the fp32
// state of the tensors it writes, gathered; the file goes straight to disk) bounds what each dp
// rank writes (io/checkpoint.h checkpoint_range: the tensors starting in its shard), and lies
// within the largest tensor of it; the ranks' tensors cover the stage once. With the state in host
// memory, borrowed, it bounds what the tensors run past each rank's shard and one tensor put
// together.
TEST(FitSearch, CheckpointHostBytesBoundEachRanksSave) {
  CpuBackend be;
  DiTConfig m = tiny_dit(4, 6, 4, 10);
  m.hidden_size = 64;
  for (int tp : {1, 2})
    for (int dp : {1, 2, 3, 4, 8}) {
      const ParamSet ps(be, DiTStage::declare(m, StageLayout::whole(m)), tp, 0, dp);
      const double stage = double(ps.padded_numel()), largest = largest_tensor_params(m, tp);
      const double buffer = double(h5::kTensorWriteBuffer);
      const double bound = checkpoint_host_bytes(stage, dp, largest, false) - buffer;
      const double borrowed = checkpoint_host_bytes(stage, dp, largest, true) - buffer;
      // Borrowed at dp 1 (the optimizer's own host buffers): HDF5's chunk buffer alone.
      if (dp == 1) EXPECT_EQ(borrowed, 0.0);
      std::int64_t most = 0, tail = 0;
      std::size_t tensors = 0;
      for (int r = 0; r < dp; ++r) {
        const FlatRange range = checkpoint_range(ps, dp, r);
        most = std::max(most, range.size());
        tensors += checkpoint_tensors(ps, dp, r).size();
        // Borrowed at dp > 1: what the rank's tensors run past its shard (Trainer::checkpoint_view).
        tail = std::max(tail, range.end - (r + 1) * (ps.padded_numel() / dp));
      }
      if (dp > 1) {
        EXPECT_GT(tail, 0) << "no rank's tensors run past its shard: the case tests nothing";
        EXPECT_LE(16.0 * double(tail) + 4.0 * largest, borrowed) << "tp " << tp << " dp " << dp;
      }
      EXPECT_EQ(tensors, ps.size()) << "tp " << tp << " dp " << dp;
      EXPECT_LE(16.0 * double(most), bound) << "tp " << tp << " dp " << dp;
      EXPECT_GE(16.0 * (double(most) + largest), bound) << "tp " << tp << " dp " << dp;
    }
}

}  // namespace dit
