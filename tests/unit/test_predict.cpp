// The performance model on hand-made plans: with free links the simulated pipeline takes
// (v m + pp - 1) chunk-microbatch times (the schedule tables' own fill and drain), links and the
// data-parallel reduction add their modelled seconds, and ranks sharing cores slow down.
#include <gtest/gtest.h>

#include "core/error.h"
#include "plan/predict.h"

namespace dit {

namespace {
LayoutPlan plan(int pp, int dp, int m, int v, double flops) {
  LayoutPlan p;
  p.layout = {1, pp, dp};
  p.micro_batch = 1;
  p.microbatches = m;
  p.tokens = 1;
  p.precision = DType::F32;
  p.virtual_stages = v;
  for (int s = 0; s < pp; ++s) {
    StagePlan st;
    st.stage = s;
    st.flops = flops;
    p.stages.push_back(st);
  }
  return p;
}
PredictParams unit_machine() {
  PredictParams h;
  h.flops_per_s = 1;
  h.rows_half = 0;
  h.latency_us = 0;
  h.intra_gbps = h.inter_gbps = 1e9;  // effectively free
  h.step_overhead_s = 0;
  return h;
}
}  // namespace

TEST(Predict, PipelineFillAndDrainFromTheTables) {
  const PredictParams h = unit_machine();
  // 24 FLOP per rank per step at 1 FLOP/s: forward 1 s and backward 2 s per microbatch (m = 8).
  const Prediction a = predict_step(plan(4, 1, 8, 1, 24), h, 8, ScheduleKind::OneFOneB);
  EXPECT_NEAR(a.pipeline_s, (8 + 3) * 3.0, 1e-9);
  EXPECT_NEAR(a.bubble, 3.0 / 11.0, 1e-9);
  EXPECT_NEAR(a.step_s, a.pipeline_s, 1e-9);
  // Two virtual stages: chunks of half the time, fill and drain in chunk times.
  const Prediction b = predict_step(plan(4, 1, 8, 2, 24), h, 8, ScheduleKind::OneFOneB);
  EXPECT_NEAR(b.pipeline_s, (16 + 3) * 1.5, 1e-9);
  EXPECT_NEAR(b.bubble, theoretical_bubble(4, 8, 2), 1e-9);
  EXPECT_LT(b.step_s, a.step_s);
  // GPipe has the same fill and drain with equal stages.
  EXPECT_NEAR(predict_step(plan(4, 1, 8, 1, 24), h, 8, ScheduleKind::GPipe).pipeline_s, 33.0, 1e-9);
  EXPECT_NEAR(a.images_per_s, 8 / a.step_s, 1e-12);
}

TEST(Predict, LinksDataParallelAndSharedCores) {
  PredictParams h = unit_machine();
  LayoutPlan p = plan(2, 2, 4, 1, 12);
  p.overlap = false;  // every dp byte exposed (ZeroOverlapReleaseAndOffload: what overlap hides)
  for (StagePlan& s : p.stages) {
    s.pp_bytes = 4;  // 4 sends of 1 byte per step on each stage (stage 0 forward, stage 1 backward)
    s.dp_bytes = 10;
    s.dp_calls = 2;
  }
  const double free_links = predict_step(p, h, 8, ScheduleKind::OneFOneB).step_s;
  h.intra_gbps = h.inter_gbps = 1e-9;  // 1 byte/s
  h.latency_us = 1e6;                  // 1 s per message
  const Prediction slow = predict_step(p, h, 8, ScheduleKind::OneFOneB);
  EXPECT_GT(slow.pipeline_s, free_links + 2.0);  // at least one message each way on the critical path
  EXPECT_NEAR(slow.dp_s, 10 + 2, 1e-6);          // bytes / bandwidth + calls x latency
  // Four data-parallel ranks on two cores run at half speed; a pipeline's waiting ranks leave
  // their share to the busy ones, so it slows down less.
  PredictParams c = unit_machine();
  c.cores = 2;
  const double alone = predict_step(plan(1, 4, 4, 1, 12), unit_machine(), 8, ScheduleKind::OneFOneB).pipeline_s;
  EXPECT_NEAR(predict_step(plan(1, 4, 4, 1, 12), c, 8, ScheduleKind::OneFOneB).pipeline_s, 2 * alone, 1e-9);
  const double pipe = predict_step(plan(4, 1, 4, 1, 12), unit_machine(), 8, ScheduleKind::OneFOneB).pipeline_s;
  const double pipe_shared = predict_step(plan(4, 1, 4, 1, 12), c, 8, ScheduleKind::OneFOneB).pipeline_s;
  EXPECT_GT(pipe_shared, pipe);
  EXPECT_LT(pipe_shared, 2 * pipe);
}

// ZeRO in the model: with optim.overlap on devices the gradient reduction (half of zero 1 and 2's
// dp bytes) hides behind the backward (2/3 of the compute), their all-gather behind the next
// forward (1/3), and zero 3's traffic behind all of it; on shared CPU
// cores nothing hides. Zero 2 and 3 pay for the gradient pages they hand back (fp32, of the dp - 1
// other shards); offload pays PCIe and host memory on devices only. The AdamW shard is the same at every level.
TEST(Predict, ZeroOverlapReleaseAndOffload) {
  PredictParams h = unit_machine();
  h.intra_gbps = h.inter_gbps = 1e-9;  // 1 byte/s
  LayoutPlan p = plan(1, 4, 1, 1, 30);  // 30 s of compute a step
  p.stages[0].dp_bytes = 20;
  p.stages[0].mem.exp_avg = 4 * 100;  // a shard of 100 parameters
  p.stages[0].shard_params = 100;
  auto dp_at = [&](int zero, bool overlap, const PredictParams& hw) {
    p.zero = zero, p.overlap = overlap;
    return predict_step(p, hw, 8, ScheduleKind::OneFOneB).dp_s;
  };
  EXPECT_NEAR(dp_at(1, false, h), 20, 1e-9);
  EXPECT_NEAR(dp_at(1, true, h), 0, 1e-9);  // 10 s behind 20 s of backward, 10 s behind 10 s of forward
  EXPECT_NEAR(dp_at(2, true, h), 0, 1e-9);
  EXPECT_NEAR(dp_at(3, true, h), 0, 1e-9);  // 20 s behind 30 s of compute
  p.stages[0].flops = 15;                   // the reduction behind 10 s, the gather behind 5 s of 10
  EXPECT_NEAR(dp_at(1, true, h), 5, 1e-9);
  EXPECT_NEAR(dp_at(3, true, h), 5, 1e-9);
  p.stages[0].flops = 6;                    // 4 s and 2 s: 6 + 8 s exposed
  EXPECT_NEAR(dp_at(1, true, h), 14, 1e-9);
  PredictParams shared = h;
  shared.cores = 8;  // 4 ranks on 8 cores: shared, each rank a whole core
  EXPECT_NEAR(dp_at(3, true, shared), 20, 1e-9);

  h.release_ns_per_byte = 1e9;  // 1 s per byte
  auto at = [&](int zero) {
    p.zero = zero;
    return predict_step(p, h, 8, ScheduleKind::OneFOneB);
  };
  EXPECT_EQ(at(1).release_s, 0);
  EXPECT_NEAR(at(2).release_s, 300 * 4, 1e-6);
  EXPECT_NEAR(at(3).release_s, 300 * 4, 1e-6);
  EXPECT_NEAR(at(1).optimizer_s, at(3).optimizer_s, 1e-12);
  h.release_ns_per_byte = 0;

  p.offload = true;
  p.stages[0].mem.exp_avg = 0;
  p.stages[0].mem.host = 16 * 100 + 4 * 100;  // master, moments and EMA of 100 parameters, their gradients
  const double pcie = 100 * (4 + 4) / 25e9, host = 2000 * 2 / 50e9;
  EXPECT_NEAR(at(1).offload_s, pcie + host, 1e-15);
  EXPECT_NEAR(at(1).optimizer_s, at(2).optimizer_s, 1e-15);
  PredictParams cpu = h;
  cpu.cores = 8;
  EXPECT_EQ(predict_step(p, cpu, 8, ScheduleKind::OneFOneB).offload_s, 0);
}

}  // namespace dit

namespace dit {

// A calibration's name reaches plan --json as a JSON string: quotes, backslashes and control
// characters are escaped (core/quote.h), where they used to be written as they stood.
TEST(Predict, CalibrationNameIsEscapedInTheJson) {
  const PredictParams p = predict_params_from_toml("[predict]\nname = \"a \\\"b\\\" \\\\ c\\n\"\n", "cal.toml");
  EXPECT_EQ(p.name, "a \"b\" \\ c\n");
  const std::string json = prediction_json(Prediction{}, p);
  EXPECT_NE(json.find("{\"hardware\": \"a \\\"b\\\" \\\\ c\\u000a\", "), std::string::npos) << json;
}

// The reader's bounds keep the model's times finite: a rate or a core share of 1e-300 predicted an
// inf step time; 0 cores still means a device per rank.
TEST(Predict, CalibrationBoundsKeepThePredictionFinite) {
  for (const char* bad : {"flops_per_s = 1e-300", "cores = 1e-300", "intra_gbps = 1e-300", "inter_gbps = 0"}) {
    try {
      predict_params_from_toml(std::string("[predict]\n") + bad + "\n", "cal.toml");
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("cal.toml: predict."), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(predict_params_from_toml("[predict]\ncores = 0\n", "cal.toml").cores, 0);
}

}  // namespace dit
