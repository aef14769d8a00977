// The composed attention (backend/composed_attention.h) on every backend against the float64
// reference of reference_ops.h, forward and backward, at token counts 1, 37, 64 and 256 and head
// dims 32, 64 and 72, with the workspace budget the GPU uses and with budgets small enough to
// force tiles of samples and groups of heads. Plus the tiling rule itself, the workspace a plan
// counts (the planning backend runs the same code), and DIT_ATTENTION=composed on the CPU.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "backend/backend.h"
#include "backend/composed_attention.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/virtual/virtual_backend.h"
#include "backend_params.h"
#include "core/arena.h"
#include "core/philox.h"
#include "io/config.h"
#include "plan/planner.h"
#include "reference_ops.h"
#include "value_checks.h"

namespace dit {
namespace {

using ref::AttnShape;
using ref::i64;
using ref::Vec;

constexpr std::uint64_t kSeed = 0xc0a9053dull;

Vec to_double(const std::vector<float>& v) { return Vec(v.begin(), v.end()); }

// Runs the composed attention on one backend, moving data only through Backend::copy.
class Harness {
 public:
  explicit Harness(const std::string& backend) : be_(make_backend(backend)), arena_(*be_) {}
  Backend& be() { return *be_; }
  DType dt() const { return be_->compute_dtype(); }

  Tensor poisoned(Shape s, DType t) {
    Tensor x = arena_.tensor(s, t);
    be_->fill(x, NAN);
    return x;
  }
  std::vector<float> download(const Tensor& t) {
    std::vector<float> h(static_cast<std::size_t>(t.numel()));
    be_->copy(Tensor{h.data(), DType::F32, t.shape, Device::Host}, t);
    be_->synchronize();
    return h;
  }
  // Normal numbers of the compute dtype; *held gets them as stored (after rounding).
  Tensor input(Shape s, double stddev, Vec* held) {
    Philox rng(kSeed, RngPurpose::Test, 0, stream_++);
    std::vector<float> v(static_cast<std::size_t>(s.numel()));
    for (float& x : v) x = static_cast<float>(stddev * rng.normal());
    Tensor x = arena_.tensor(s, dt());
    be_->copy(x, Tensor{v.data(), DType::F32, s, Device::Host});
    be_->synchronize();
    *held = to_double(download(x));
    return x;
  }

 private:
  std::unique_ptr<Backend> be_;
  Arena arena_;
  std::uint64_t stream_ = 0;
};

std::string label(const char* what, const AttnShape& s, std::size_t budget) {
  return std::string(what) + " N" + std::to_string(s.n) + " T" + std::to_string(s.t) + " H" +
         std::to_string(s.h) + " E" + std::to_string(s.e) +
         (budget == ComposedAttention::kDefaultBudget ? "" : " tiled");
}

// Forward (out, lse) and backward (dq, dk, dv) of one problem at one workspace budget.
void check_problem(Harness& h, const AttnShape& s, std::size_t budget) {
  const double tol = ref::tolerance(h.dt());
  Vec qkv_h, dout_h;
  const Tensor qkv = h.input({s.n, s.t, s.width()}, 1.5, &qkv_h);
  const Tensor dout = h.input({s.n, s.t, s.h * s.e}, 1.0, &dout_h);
  ComposedAttention attn(h.be(), budget);
  const int heads = static_cast<int>(s.h);
  const Tensor out = h.poisoned({s.n, s.t, s.h * s.e}, h.dt());
  const Tensor lse = h.poisoned({s.n, s.h, s.t}, DType::F32);
  attn.forward(h.be(), qkv, heads, out, lse);
  const ref::AttnOut want = ref::attention_fwd(qkv_h, s);
  check_values(label("composed out", s, budget), h.download(out), want.out, tol);
  check_values(label("composed lse", s, budget), h.download(lse), want.lse, tol);
  const Tensor dqkv = h.poisoned({s.n, s.t, s.width()}, h.dt());
  attn.backward(h.be(), qkv, out, lse, dout, heads, dqkv);
  const std::vector<float> got = h.download(dqkv);
  const Vec want_d = ref::attention_bwd(qkv_h, dout_h, s);
  if (s.t > 1) {
    check_qkv_blocks(label("composed backward", s, budget), got, want_d, s, tol);
  } else {
    // One token: P = 1, so dS = 0 and dq = dk = 0 exactly in the math; dv = dO. Within the
    // tolerance, dq and dk must be zero next to dv.
    double qk = 0, v = 0;
    for (i64 row = 0; row < s.n; ++row)
      for (i64 i = 0; i < 3 * s.h * s.e; ++i) {
        const double g = got[row * s.width() + i];
        (i < 2 * s.h * s.e ? qk : v) += g * g;
      }
    EXPECT_LE(std::sqrt(qk), tol * std::sqrt(v)) << label("composed backward dq, dk", s, budget);
    std::vector<float> dv;
    Vec dv_want;
    for (i64 row = 0; row < s.n; ++row)
      for (i64 i = 2 * s.h * s.e; i < s.width(); ++i) {
        dv.push_back(got[row * s.width() + i]);
        dv_want.push_back(want_d[row * s.width() + i]);
      }
    check_values(label("composed backward dv", s, budget), dv, dv_want, tol);
  }
  EXPECT_LE(attn.workspace_bytes(), std::max(budget, composed_tile_bytes(
      {s.n, s.t, s.h, s.e, h.dt()}, AttnDirection::Backward, {1, 1})));
}

// Parameters: backend, tokens T, head dim E. N = 2 samples of H = 3 heads.
class ComposedAttentionConformance
    : public ::testing::TestWithParam<std::tuple<std::string, i64, i64>> {
 protected:
  void SetUp() override {
    std::string why;
    if (!backend_available(backend(), &why))
      GTEST_SKIP() << "backend '" << backend() << "' is not available: " << why;
  }
  std::string backend() const { return std::get<0>(GetParam()); }
  AttnShape shape() const { return AttnShape{2, std::get<1>(GetParam()), 3, std::get<2>(GetParam())}; }
};

TEST_P(ComposedAttentionConformance, ForwardAndBackwardMatchFloat64) {
  Harness h(backend());
  check_problem(h, shape(), ComposedAttention::kDefaultBudget);
}

// Budgets for one sample (all heads, forcing one tile per sample) and for one head of one sample
// (forcing groups of one head), so every tiling branch runs against the same reference.
TEST_P(ComposedAttentionConformance, TiledOverSamplesAndHeadsMatchesFloat64) {
  Harness h(backend());
  const AttnShape s = shape();
  const AttentionDims d{s.n, s.t, s.h, s.e, h.dt()};
  const std::size_t one_sample = composed_tile_bytes(d, AttnDirection::Backward, {1, s.h});
  if (composed_tile_bytes(d, AttnDirection::Backward, {2, s.h}) > one_sample)
    EXPECT_EQ(composed_tiling(d, AttnDirection::Backward, one_sample).samples, 1);
  check_problem(h, s, one_sample);
  const std::size_t one_head = composed_tile_bytes(d, AttnDirection::Backward, {1, 1});
  // (At T = 1 the 256-byte alignment of the parts makes one head cost as much as three.)
  if (composed_tile_bytes(d, AttnDirection::Backward, {1, 2}) > one_head)
    EXPECT_EQ(composed_tiling(d, AttnDirection::Backward, one_head).heads, 1);
  check_problem(h, s, one_head);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, ComposedAttentionConformance,
    ::testing::Combine(::testing::Values(std::string("cpu"), std::string("cpu:bf16"),
                                         std::string("cuda"), std::string("cuda:bf16")),
                       ::testing::Values(i64{1}, i64{37}, i64{64}, i64{256}),
                       ::testing::Values(i64{32}, i64{64}, i64{72})),
    [](const ::testing::TestParamInfo<std::tuple<std::string, i64, i64>>& p) {
      std::string b = std::get<0>(p.param);
      for (char& c : b)
        if (c == ':') c = '_';
      return b + "_T" + std::to_string(std::get<1>(p.param)) + "_E" +
             std::to_string(std::get<2>(p.param));
    });

// The tiling keeps within its budget, takes whole samples while they fit, cuts equal tiles, and
// falls to groups of heads only when one sample does not fit.
TEST(ComposedAttentionTiling, StaysWithinBudgetWithEqualTiles) {
  const AttentionDims xl{32, 256, 16, 72, DType::BF16};  // DiT-XL/2 at 256 px, 32 per GPU
  for (AttnDirection dir : {AttnDirection::Forward, AttnDirection::Backward}) {
    const AttentionTiling t = composed_tiling(xl, dir, ComposedAttention::kDefaultBudget);
    EXPECT_EQ(t.heads, 16);
    EXPECT_GE(t.samples, 1);
    EXPECT_LE(composed_tile_bytes(xl, dir, t), ComposedAttention::kDefaultBudget);
    EXPECT_EQ(32 % t.samples, 0) << "tiles of " << t.samples << " samples are not equal";
  }
  const AttentionDims big{1, 4096, 16, 64, DType::BF16};  // one sample over the budget
  const AttentionTiling t = composed_tiling(big, AttnDirection::Backward, std::size_t{64} << 20);
  EXPECT_EQ(t.samples, 1);
  EXPECT_LT(t.heads, 16);
  EXPECT_EQ(16 % t.heads, 0);
  // A budget below one head still runs, one head at a time.
  EXPECT_EQ(composed_tiling(big, AttnDirection::Backward, 1).heads, 1);
}

// The planning backend runs the composed attention too: the workspace it counts is the one the
// GPU would hold for the same problem on the composed path.
TEST(ComposedAttentionPlan, VirtualBackendCountsTheWorkspace) {
  VirtualBackend be(DType::BF16);
  Arena arena(be);
  const i64 n = 8, t = 256, h = 16, e = 72;
  const Tensor qkv = arena.tensor({n, t, 3 * h * e}, DType::BF16);
  const Tensor out = arena.tensor({n, t, h * e}, DType::BF16);
  const Tensor lse = arena.tensor({n, h, t}, DType::F32);
  EXPECT_EQ(be.workspace_bytes(), 0u);
  be.attention_fwd(qkv, static_cast<int>(h), out, lse);
  be.attention_bwd(qkv, out, lse, out, static_cast<int>(h), qkv);
  const AttentionDims d{n, t, h, e, DType::BF16};
  const std::size_t want = composed_tile_bytes(
      d, AttnDirection::Backward,
      composed_tiling(d, AttnDirection::Backward, ComposedAttention::kDefaultBudget));
  EXPECT_EQ(be.workspace_bytes(), want);
  EXPECT_GT(want, std::size_t(n * h * t * t * 6));  // the scores of every head are in it
}

// The CPU backend's default stays its own fused kernel (no workspace held); the composed path is
// taken when chosen, and gives the same numbers within the fp32 tolerance.
TEST(ComposedAttentionCpu, ChosenPathRunsComposedDefaultDoesNot) {
  const AttnShape s{2, 37, 3, 32};
  for (AttentionPath path : {AttentionPath::Auto, AttentionPath::Composed}) {
    CpuBackend be;
    be.set_attention_path(path);
    Arena arena(be);
    Philox rng(kSeed, RngPurpose::Test, 1, 0);
    const Tensor qkv = arena.tensor({s.n, s.t, s.width()}, DType::F32);
    Vec qkv_h(static_cast<std::size_t>(qkv.numel()));
    for (i64 i = 0; i < qkv.numel(); ++i) qkv.f32()[i] = static_cast<float>(qkv_h[i] = rng.normal());
    for (i64 i = 0; i < qkv.numel(); ++i) qkv_h[i] = qkv.f32()[i];
    const Tensor out = arena.tensor({s.n, s.t, s.h * s.e}, DType::F32);
    const Tensor lse = arena.tensor({s.n, s.h, s.t}, DType::F32);
    be.attention_fwd(qkv, static_cast<int>(s.h), out, lse);
    const std::vector<float> got(out.f32(), out.f32() + out.numel());
    check_values(path == AttentionPath::Auto ? "cpu default out" : "cpu composed out", got,
                 ref::attention_fwd(qkv_h, s).out, ref::tolerance(DType::F32));
    EXPECT_EQ(be.workspace_bytes() > 0, path == AttentionPath::Composed);
  }
}

// `dit_mp plan` counts the composed attention's workspace where the run takes that path (a GPU
// run, where cuDNN cannot serve), and not for the CPU's fused kernel: the plan stays the run's own.
TEST(ComposedAttentionPlan, PlanCountsTheWorkspaceOfTheGpuPathOnly) {
  RunConfig c = RunConfig::demo();
  c.parallel.tp = 1, c.parallel.pp = 1;
  const LayoutPlan cpu = plan_config(c, {1, 1, 1});
  c.train.backend = BackendKind::Cuda;
  const LayoutPlan gpu = plan_config(c, {1, 1, 1});
  const DiTConfig& m = c.model.dit;
  const AttentionDims d{c.train.micro_batch, m.num_patches(), m.num_heads, m.hidden_size / m.num_heads, DType::F32};
  const std::size_t tiles = composed_tile_bytes(
      d, AttnDirection::Backward, composed_tiling(d, AttnDirection::Backward, ComposedAttention::kDefaultBudget));
  EXPECT_GT(tiles, 0u);
  EXPECT_EQ(gpu.stages[0].mem.workspace - cpu.stages[0].mem.workspace, tiles);
}

}  // namespace
}  // namespace dit
