// Learned pruning's gates (engine/layer_gates.h) and the gated blocks of DiTStage: the groups and
// their refusals; the hard Gumbel-softmax draw and the logits' straight-through gradient against a
// float64 reference written here (the noise re-drawn from the Philox stream, the gradient against
// central differences of the soft relaxation); a block gated open is the block, a block gated
// shut is the model without it (the pruned model, bit for bit, forward and the other blocks'
// gradients), and dL/dm matches central differences of a continuously gated model.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "core/arena.h"
#include "core/philox.h"
#include "engine/dit_pipeline.h"
#include "engine/layer_gates.h"
#include "engine/prune.h"
#include "io/weights.h"
#include "io_test_util.h"
#include "parallel/comm.h"
#include "random_weights.h"
#include "tiny_model.h"

namespace dit {
namespace {

using io_test::Scratch;

TEST(LayerGates, GroupsTileTheDepth) {
  EXPECT_EQ(gate_groups({{4, 2}, {4, 2}}, 8, 4), (std::vector<GateGroup>{{0, 4, 2}, {4, 4, 2}}));
  EXPECT_EQ(gate_groups(parse_groups_text("3:1,5:3", 8, 4, kMaxGateChoices), 8, 4),
            (std::vector<GateGroup>{{0, 3, 1}, {3, 5, 3}}));
  EXPECT_EQ(groups_text(default_gate_groups(28, 14)), "4:2,4:2,4:2,4:2,4:2,4:2,4:2");  // TinyFusion's DiT-XL
  EXPECT_EQ(groups_text(default_gate_groups(8, 4)), "4:2,4:2");
  EXPECT_EQ(groups_text(default_gate_groups(9, 3)), "3:1,3:1,3:1");  // 6 does not tile 9
  EXPECT_EQ(groups_text(default_gate_groups(6, 2)), "6:2");
  EXPECT_TRUE(default_gate_groups(8, 3).empty());
  // The text's refusals name --groups (io/prune_text.h, PruneText.*); below it, invariants.
  EXPECT_THROW(gate_groups({{4, 2}, {2, 1}}, 8, 3), Error);
  EXPECT_THROW(gate_groups({{4, 5}, {4, 2}}, 8, 4), Error);
  EXPECT_THROW(gate_groups({{30, 15}}, 30, 15), Error);
}

// The reference: the choices of a group in lexicographic order, and y = softmax((s l + G) / tau)
// with G = -log(-log u), u the stream's uniforms in order.
std::vector<std::vector<int>> choices(int m, int n) {
  std::vector<std::vector<int>> out;
  for (int bits = 0; bits < (1 << m); ++bits) {
    if (__builtin_popcount(bits) != n) continue;
    std::vector<int> c;
    for (int i = 0; i < m; ++i)
      if (bits >> i & 1) c.push_back(i);
    out.push_back(c);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<double> soft(const std::vector<double>& logits, const std::vector<double>& gumbel, double s, double tau) {
  std::vector<double> y(logits.size());
  double top = -1e300, sum = 0;
  for (std::size_t c = 0; c < y.size(); ++c) top = std::max(top, (s * logits[c] + gumbel[c]) / tau);
  for (std::size_t c = 0; c < y.size(); ++c) sum += y[c] = std::exp((s * logits[c] + gumbel[c]) / tau - top);
  for (double& v : y) v /= sum;
  return y;
}

TEST(LayerGates, HardChoiceAndStraightThroughGradientMatchTheReference) {
  GateSettings s;
  s.groups = {{0, 4, 2}, {4, 3, 1}};
  s.init = 0.0;
  const std::uint64_t seed = 11;
  const std::int64_t step = 3, steps = 10, first = 40, n = 5;
  LayerGates gates(s, seed);
  gates.begin_step(step, steps);
  gates.sample(0, first, n);
  const double tau = 4.0 + (0.1 - 4.0) * 3.0 / 9.0, scale = 100.0;
  EXPECT_NEAR(s.tau_at(step, steps), tau, 1e-15);
  // dL/dm of every block and sample (7 blocks x 5 samples), any values.
  std::vector<float> dm(7 * n);
  Philox r(1, RngPurpose::Test, 0, 0);
  for (float& v : dm) v = r.normal();
  gates.backward(0, dm.data(), 1.0);
  const std::vector<double> got = gates.gradient();

  std::vector<double> want;
  for (std::size_t g = 0; g < s.groups.size(); ++g) {
    const GateGroup& gr = s.groups[g];
    const auto opts = choices(gr.size, gr.keep);
    std::vector<double> grad(opts.size(), 0.0);
    for (std::int64_t i = 0; i < n; ++i) {
      Philox rng(seed, RngPurpose::Gate, step, first + i);
      std::vector<double> gumbel;
      for (std::size_t gg = 0; gg <= g; ++gg) {  // the earlier groups' draws come first
        const std::size_t count = choices(s.groups[gg].size, s.groups[gg].keep).size();
        for (std::size_t c = 0; c < count; ++c) {
          const double u = std::max(rng.uniform_f64(), 0x1p-60);
          if (gg == g) gumbel.push_back(-std::log(-std::log(u)));
        }
      }
      const std::vector<double> zero(opts.size(), 0.0);
      const std::vector<double> y = soft(zero, gumbel, scale, tau);
      const std::size_t pick = std::max_element(y.begin(), y.end()) - y.begin();
      for (int b = 0; b < gr.size; ++b) {
        const bool kept = std::find(opts[pick].begin(), opts[pick].end(), b) != opts[pick].end();
        EXPECT_EQ(gates.mask(0, gr.first + b)[i], kept ? 1.f : 0.f)
            << "group " << g << " block " << b << " sample " << i;
      }
      // f(l) = sum_c y_c(l) sum_{j in c} dm_j: its derivative is the straight-through gradient.
      const auto f = [&](const std::vector<double>& l) {
        const std::vector<double> yy = soft(l, gumbel, scale, tau);
        double v = 0;
        for (std::size_t c = 0; c < opts.size(); ++c)
          for (int j : opts[c]) v += yy[c] * dm[(gr.first + j) * n + i];
        return v;
      };
      for (std::size_t c = 0; c < opts.size(); ++c) {
        std::vector<double> lp = zero, lm = zero;
        const double h = 1e-7;
        lp[c] += h, lm[c] -= h;
        grad[c] += (f(lp) - f(lm)) / (2 * h);
      }
    }
    want.insert(want.end(), grad.begin(), grad.end());
  }
  ASSERT_EQ(got.size(), want.size());
  double err = 0, norm = 0;
  for (std::size_t k = 0; k < got.size(); ++k) {
    err += (got[k] - want[k]) * (got[k] - want[k]);
    norm += want[k] * want[k];
  }
  EXPECT_LT(std::sqrt(err / norm), 1e-6) << "relative L2 error of dL/dlogits";
}

TEST(LayerGates, AdamStepOnTheReducedGradientAndTheEmaDecides) {
  GateSettings s;
  s.groups = {{0, 2, 1}};
  s.lr = 0.5;
  s.ema_decay = 0.5;
  LayerGates gates(s, 0);
  gates.begin_step(0, 1);
  gates.sample(0, 0, 1);
  const std::vector<float> dm = {-1.f, 1.f};  // keeping block 0 lowers the loss
  gates.backward(0, dm.data(), 1.0);
  SelfComm world;
  gates.update(world, 1.0);
  const std::vector<double> l = gates.logits();
  // AdamW's first step moves each logit by lr against its gradient's sign.
  EXPECT_NEAR(l[0], 0.02 + 0.5, 1e-6);
  EXPECT_NEAR(l[1], 0.02 - 0.5, 1e-6);
  EXPECT_NEAR(gates.ema_logits()[0], 0.5 * 0.02 + 0.5 * l[0], 1e-12);
  EXPECT_EQ(gates.decision(), std::vector<int>{0});
  EXPECT_TRUE(gates.gradient() == (std::vector<double>{0.0, 0.0}));  // update resets
  EXPECT_EQ(gates.updates(), 1);
}

// ---- gated blocks in the stage --------------------------------------------------------------


struct Pass {
  std::vector<float> out;
  double loss = 0;  // <out, cotangent>
  std::vector<std::vector<float>> dm;  // per gated block
};

// One forward and backward of the whole model with the cotangent `cot` (loss = <out, cot>),
// optionally with a gate per block (masks[b]: N values).
Pass run(Backend& be, DiTStage& model, std::int64_t n, const std::vector<float>& cot,
         const std::vector<std::vector<float>>& masks = {}) {
  const DiTConfig& cfg = model.config();
  Arena saved(be), scratch(be), grads(be);
  std::vector<float> images(static_cast<std::size_t>(n * cfg.in_channels * cfg.input_size * cfg.input_size));
  Philox rng(5, RngPurpose::Test, 1, 0);
  for (float& v : images) v = rng.normal();
  const std::vector<float> t = {10.f, 500.f, 999.f};
  const std::vector<std::int32_t> y = {0, 2, 4};
  StageInputs in;
  upload_stage_inputs(be, cfg, n, {images.data(), t.data(), y.data()}, in, saved);
  std::vector<Tensor> dms;
  for (const std::vector<float>& m : masks) {
    dms.push_back(grads.tensor({n}, DType::F32));
    in.gates.push_back({m.data(), dms.back()});
  }
  model.params().zero_grads();
  const StageActs a = model.forward(in, saved, scratch);
  Pass p;
  p.out.resize(static_cast<std::size_t>(a.final.out.numel()));
  be.copy(Tensor{p.out.data(), DType::F32, a.final.out.shape, Device::Host}, a.final.out);
  for (std::size_t i = 0; i < p.out.size(); ++i) p.loss += double(p.out[i]) * cot[i];
  StageGrads g;
  g.dout = grads.tensor(a.final.out.shape, DType::F32);
  be.copy(g.dout, Tensor{const_cast<float*>(cot.data()), DType::F32, a.final.out.shape, Device::Host});
  g.dx = grads.tensor(a.x_out().shape, DType::F32);
  g.dc = grads.tensor(a.c.shape, DType::F32);
  model.backward(a, g, scratch);
  for (const Tensor& d : dms) {
    std::vector<float> h(static_cast<std::size_t>(n));
    be.copy(Tensor{h.data(), DType::F32, {n}, Device::Host}, d);
    p.dm.push_back(h);
  }
  return p;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class GatedStage : public ::testing::Test {
 protected:
  void SetUp() override {
    cfg_ = tiny_dit(2, 3, 2, 5);
    tensors_ = random_tensors(cfg_, 3, 0.2f);
    save_weights(dir_ / "teacher.h5", cfg_, tensors_, 1000, diffusion::Objective::Ddpm);
    full_ = std::make_unique<DiTStage>(*be_, cfg_, StageLayout::whole(cfg_), tp_);
    load_weights(dir_ / "teacher.h5", full_->params());
    Philox rng(9, RngPurpose::Test, 2, 0);
    cot_.resize(static_cast<std::size_t>(n_ * cfg_.out_channels() * cfg_.input_size * cfg_.input_size));
    for (float& v : cot_) v = rng.normal();
  }
  Scratch dir_{"gates"};
  std::unique_ptr<Backend> be_ = make_backend("cpu");
  SelfComm tp_;
  DiTConfig cfg_;
  std::map<std::string, std::vector<float>> tensors_;
  std::unique_ptr<DiTStage> full_;
  std::int64_t n_ = 3;
  std::vector<float> cot_;
};

TEST_F(GatedStage, OpenGatesAreTheModel) {
  const Pass plain = run(*be_, *full_, n_, cot_);
  std::vector<std::vector<float>> grads;
  for (std::size_t i = 0; i < full_->params().size(); ++i) grads.push_back(full_->params().grad_host(int(i)));
  const Pass gated = run(*be_, *full_, n_, cot_, {{1, 1, 1}, {1, 1, 1}, {1, 1, 1}});
  EXPECT_TRUE(same_bits(plain.out, gated.out));
  for (std::size_t i = 0; i < full_->params().size(); ++i)
    EXPECT_TRUE(same_bits(grads[i], full_->params().grad_host(int(i)))) << full_->params().specs()[i].name;
}

TEST_F(GatedStage, AShutGateIsTheModelWithoutTheBlock) {
  write_pruned_weights(dir_ / "teacher.h5", dir_ / "pruned.h5", {0, 2}, "index");
  const DiTConfig small = read_weights_config(dir_ / "pruned.h5");
  DiTStage pruned(*be_, small, StageLayout::whole(small), tp_);
  load_weights(dir_ / "pruned.h5", pruned.params());
  const Pass want = run(*be_, pruned, n_, cot_);
  const Pass got = run(*be_, *full_, n_, cot_, {{1, 1, 1}, {0, 0, 0}, {1, 1, 1}});
  EXPECT_TRUE(same_bits(want.out, got.out));
  const ParamSet& a = full_->params();
  const ParamSet& b = pruned.params();
  for (std::size_t i = 0; i < b.size(); ++i) {
    std::string name = b.specs()[i].name;
    if (name.rfind("blocks.1.", 0) == 0) name = "blocks.2." + name.substr(9);  // pruned block 1 is block 2
    EXPECT_TRUE(same_bits(b.grad_host(int(i)), a.grad_host(a.index(name)))) << name;
  }
  // A shut block learns nothing.
  for (const float v : a.grad_host(a.index("blocks.1.mlp.fc1.weight"))) ASSERT_EQ(v, 0.f);
  // Per sample: sample 1 alone shut equals the pruned model on that sample only.
  const Pass mixed = run(*be_, *full_, n_, cot_, {{1, 1, 1}, {1, 0, 1}, {1, 1, 1}});
  const Pass open = run(*be_, *full_, n_, cot_);
  const std::size_t per = mixed.out.size() / n_;
  for (std::int64_t s = 0; s < n_; ++s) {
    const std::vector<float>& ref = s == 1 ? want.out : open.out;
    EXPECT_EQ(std::memcmp(mixed.out.data() + s * per, ref.data() + s * per, per * sizeof(float)), 0) << "sample " << s;
  }
}

// dL/dm against central differences of the continuously gated model (fp32 forward, so the check
// is a derivative check at a step that keeps rounding small, not a float64 comparison).
TEST_F(GatedStage, MaskGradientMatchesCentralDifferences) {
  const std::vector<std::vector<float>> at = {{1, 1, 1}, {1, 0, 0.5f}, {0, 1, 1}};
  const Pass p = run(*be_, *full_, n_, cot_, at);
  const float h = 1e-2f;
  double err = 0, norm = 0;
  for (int b = 0; b < 3; ++b)
    for (std::int64_t s = 0; s < n_; ++s) {
      auto plus = at, minus = at;
      plus[b][s] += h, minus[b][s] -= h;
      const double fd = (run(*be_, *full_, n_, cot_, plus).loss - run(*be_, *full_, n_, cot_, minus).loss) / (2 * h);
      err += (p.dm[b][s] - fd) * (p.dm[b][s] - fd);
      norm += fd * fd;
    }
  EXPECT_GT(norm, 0);
  EXPECT_LT(std::sqrt(err / norm), 1e-3) << "relative L2 error of dL/dm";
}

}  // namespace
}  // namespace dit
