// The split backward at one rank: a DiT stage run by the pipeline executor with each backward as
// B (BackwardInput) then W (BackwardWeight), the Ws late as zero-bubble schedules place them,
// accumulates bit-identical parameter gradients to the fused backward: GELU and LightningDiT
// blocks, every recomputation mode, fp32 and bf16. (tp 2 with sequence parallelism: mpi.layouts.)
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "backend/backend.h"
#include "engine/dit_pipeline.h"
#include "engine/global_tensors.h"
#include "tiny_model.h"

namespace dit {
namespace {

std::vector<float> randn(std::size_t n, std::uint32_t seed, float scale) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

// The parameter grads after `actions` over m microbatches of 2 samples, from fixed random weights,
// inputs and output gradients.
std::vector<float> grads_after(const std::vector<Action>& actions, int m, DType dt, Recompute mode,
                               const DiTConfig& cfg) {
  auto be = make_backend("cpu", dt);
  SelfComm tp, pp;
  StageOptions opt;
  opt.recompute = mode;
  DiTStage model(*be, cfg, StageLayout::whole(cfg), tp, 1, opt);
  const std::vector<float> w = randn(static_cast<std::size_t>(model.params().padded_numel()), 1, 0.2f);
  be->copy(model.params().flat_values(),
           Tensor{const_cast<float*>(w.data()), DType::F32, {std::int64_t(w.size())}, Device::Host});
  model.params().zero_grads();
  const std::int64_t n = 2, img = cfg.in_channels * cfg.input_size * cfg.input_size;
  const std::vector<float> images = randn(static_cast<std::size_t>(m * n * img), 2, 1.f);
  const std::vector<float> douts = randn(static_cast<std::size_t>(m * n * cfg.out_channels() * img / cfg.in_channels), 3, 1.f);
  const std::vector<float> t = {3.f, 700.f};
  const std::vector<std::int32_t> labels = {1, 4};
  DiTPipelineHooks hooks;
  hooks.make_inputs = [&](int mb, StageInputs& in, Arena& arena) {
    upload_stage_inputs(*be, cfg, n, {images.data() + mb * n * img, t.data(), labels.data()}, in, arena);
  };
  hooks.on_output = [&](int mb, const Tensor& out, Arena& arena) {
    Tensor d = arena.tensor(out.shape, be->compute_dtype());
    be->copy(d, Tensor{const_cast<float*>(douts.data()) + mb * out.numel(), DType::F32, out.shape, Device::Host});
    return d;
  };
  DiTPipelineStage stage(*be, model, n, hooks);
  PipelineExecutor(pp, *be).run(actions, m, stage);
  return host_copy(*be, model.params().flat_grads());
}

DiTConfig lightning() {
  DiTConfig c = tiny_dit(2, 2, 4, 5);
  c.mlp_ratio = 3.0;
  c.learn_sigma = false;
  c.mlp = MlpKind::Swiglu, c.norm = NormKind::RmsNorm, c.pos_embed = PosEmbed::Rope, c.qk_norm = true;
  return c;
}

}  // namespace

TEST(SplitBackward, BThenWIsBitIdenticalToFused) {
  constexpr Op F = Op::Forward, B = Op::BackwardInput, W = Op::BackwardWeight;
  // fused: F0 F1 F2 X0 X1 X2; split: F0 F1 B0 F2 B1 W0 B2 W1 W2 (Ws late, in microbatch order)
  const std::vector<Action> fused = {{F, 0}, {F, 1}, {F, 2}, {Op::Backward, 0}, {Op::Backward, 1}, {Op::Backward, 2}};
  const std::vector<Action> split = {{F, 0}, {F, 1}, {B, 0}, {F, 2}, {B, 1}, {W, 0}, {B, 2}, {W, 1}, {W, 2}};
  for (const DiTConfig& cfg : {tiny_dit(2, 2, 4, 5), lightning()})
    for (DType dt : {DType::F32, DType::BF16})
      for (Recompute mode : {Recompute::None, Recompute::Selective, Recompute::Full}) {
        const std::vector<float> a = grads_after(fused, 3, dt, mode, cfg), b = grads_after(split, 3, dt, mode, cfg);
        ASSERT_EQ(a.size(), b.size());
        double norm = 0;
        for (float x : a) norm += double(x) * x;
        EXPECT_GT(norm, 0.0);
        EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
            << name_of(kMlpNames, cfg.mlp) << " " << (dt == DType::F32 ? "fp32" : "bf16") << " "
            << recompute_name(mode);
      }
}

// The test has teeth: a W that never runs leaves the linears' grads out.
TEST(SplitBackward, MissingWeightPassLosesTheLinearGrads) {
  constexpr Op F = Op::Forward, B = Op::BackwardInput;
  const std::vector<Action> fused = {{F, 0}, {Op::Backward, 0}};
  const std::vector<float> a = grads_after(fused, 1, DType::F32, Recompute::None, tiny_dit(2, 2, 4, 5));
  EXPECT_THROW(grads_after({{F, 0}, {B, 0}}, 1, DType::F32, Recompute::None, tiny_dit(2, 2, 4, 5)), std::exception);
  (void)a;
}

}  // namespace dit
