// Mixed precision on the CPU: fp16 conversions, the dynamic loss scaler, and training with 16-bit
// storage (fp32 master weights, fp16 overflow skipping), through the same Trainer the GPU runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "engine/trainer.h"
#include "backend/cpu/cpu_backend.h"
#include "core/philox.h"
#include "optim/loss_scale.h"
#include "parallel/backend_comms.h"
#include "tiny_model.h"

namespace dit {
namespace {

// ---- fp16 conversions ---------------------------------------------------------------------------

// The value of fp16 bits by the format's definition, in double.
double f16_value(std::uint16_t h) {
  const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  const double mag = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
  return (h & 0x8000) ? -mag : mag;
}

// Round to nearest, ties to even, by searching the finite fp16 magnitudes; past the largest
// (65504) the next step would be 65536, so values from the midpoint 65520 on become inf.
std::uint16_t f16_reference(float f) {
  const double v = std::fabs(static_cast<double>(f));
  const std::uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  auto value = [](std::uint32_t b) { return b == 0x7c00 ? 65536.0 : f16_value(static_cast<std::uint16_t>(b)); };
  std::uint32_t lo = 0, hi = 0x7c00;  // value(lo) <= v < value(hi) once v < 65536
  if (v >= 65536.0) return sign | 0x7c00;
  while (hi - lo > 1) {
    const std::uint32_t mid = (lo + hi) / 2;
    (value(mid) <= v ? lo : hi) = mid;
  }
  const double dlo = v - value(lo), dhi = value(hi) - v;
  const std::uint32_t r = dlo < dhi ? lo : dhi < dlo ? hi : (lo % 2 ? hi : lo);
  return static_cast<std::uint16_t>(sign | r);
}

TEST(Fp16, EveryValueWidensExactlyAndRoundTrips) {
  for (std::uint32_t b = 0; b < 0x10000u; ++b) {
    const auto h = static_cast<std::uint16_t>(b);
    const float f = f16_bits_to_float(h);
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) {
      EXPECT_TRUE(std::isnan(f)) << std::hex << b;
      EXPECT_EQ(float_to_f16_bits(f) & 0x7e00, 0x7e00) << "NaN stays NaN: " << std::hex << b;
      continue;
    }
    const double want = (h & 0x7fff) == 0x7c00 ? ((h & 0x8000) ? -INFINITY : INFINITY) : f16_value(h);
    ASSERT_EQ(static_cast<double>(f), want) << std::hex << b;
    ASSERT_EQ(float_to_f16_bits(f), h) << std::hex << b;
  }
}

TEST(Fp16, NarrowingRoundsToNearestEvenAtEveryBoundary) {
  std::vector<float> cases;
  for (std::uint32_t b = 0; b < 0x7c00u; ++b) {  // each finite magnitude, the midpoint above it
    const double v = f16_value(static_cast<std::uint16_t>(b));
    const double next = b + 1 == 0x7c00u ? 65536.0 : f16_value(static_cast<std::uint16_t>(b + 1));
    for (double x : {v, 0.5 * (v + next)}) {
      const float f = static_cast<float>(x);
      for (float g : {std::nextafter(f, 0.f), f, std::nextafter(f, INFINITY)}) {
        cases.push_back(g);
        cases.push_back(-g);
      }
    }
  }
  for (float f : {1e-10f, 7e-8f, 65519.f, 65520.f, 1e6f, INFINITY, -INFINITY}) cases.push_back(f);
  Philox rng(3, RngPurpose::Test, 0, 0);
  for (int i = 0; i < 200000; ++i) {  // random floats from 2^-27 to 2^18: subnormals to overflow
    const std::uint32_t exponent = 100 + rng.below(46), bits = rng.next_u32();
    cases.push_back(std::bit_cast<float>((bits & 0x807fffffu) | exponent << 23));
  }
  std::size_t wrong = 0;
  for (float f : cases) {
    if (std::isnan(f)) continue;
    const std::uint16_t got = float_to_f16_bits(f), want = f16_reference(f);
    if (got != want && wrong++ < 5)
      ADD_FAILURE() << "fp32 " << f << " (bits " << std::hex << std::bit_cast<std::uint32_t>(f) << ") -> fp16 "
                    << got << ", expected " << want;
  }
  EXPECT_EQ(wrong, 0u) << "of " << cases.size() << " values";
  EXPECT_GT(cases.size(), 300000u);
}

// ---- the loss scaler -----------------------------------------------------------------------------

TEST(LossScaler, OffForBf16AndFp32StillSkipsNonFiniteSteps) {
  LossScaler s(LossScaling::Off);
  EXPECT_EQ(s.scale(), 1.0);
  EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.state().skipped_steps, 0);
  EXPECT_FALSE(s.update(false));  // a non-finite gradient is never applied, scaling or not
  EXPECT_FALSE(s.update(false));
  EXPECT_EQ(s.scale(), 1.0);
  EXPECT_EQ(s.state().skipped_steps, 2);
  EXPECT_EQ(s.state().nonfinite_in_row, 2);
  EXPECT_TRUE(s.update(true));  // a finite step ends the streak, not the count
  EXPECT_EQ(s.state().nonfinite_in_row, 0);
  EXPECT_EQ(s.state().skipped_steps, 2);
}

TEST(LossScaler, HalvesAndSkipsOnOverflowDoublesAfterCleanStepsNeverBelowOne) {
  LossScaler s(LossScaling::Dynamic, 3);
  EXPECT_EQ(s.scale(), 65536.0);
  EXPECT_FALSE(s.update(false));
  EXPECT_EQ(s.scale(), 32768.0);
  EXPECT_TRUE(s.update(true));
  EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.scale(), 32768.0);
  EXPECT_TRUE(s.update(true));  // the third clean step in a row
  EXPECT_EQ(s.scale(), 65536.0);
  EXPECT_EQ(s.state().clean_steps, 0);
  EXPECT_TRUE(s.update(true));
  EXPECT_FALSE(s.update(false));  // an overflow resets the clean count
  EXPECT_EQ(s.state().clean_steps, 0);
  EXPECT_EQ(s.state().skipped_steps, 2);
  for (int i = 0; i < 40; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 1.0);

  LossScaler d(LossScaling::Dynamic);
  for (int i = 0; i < 999; ++i) d.update(true);
  EXPECT_EQ(d.scale(), 65536.0);
  d.update(true);
  EXPECT_EQ(d.scale(), 131072.0) << "doubles after 1000 clean steps";
}

TEST(LossScaler, RestoreChecksAndRestartsFromRunsWithoutScaling) {
  LossScaler s(LossScaling::Dynamic);
  s.restore({1024.0, 17, 3, true});
  EXPECT_EQ(s.scale(), 1024.0);
  EXPECT_EQ(s.state().clean_steps, 17);
  s.restore({1.0, 0, 0, true});  // an fp16 run that came down to scale 1 keeps it
  EXPECT_EQ(s.scale(), 1.0);
  s.restore({1.0, 0, 2, false});  // what an fp32 or bf16 run saves
  EXPECT_EQ(s.scale(), LossScaler::kInitialScale);
  EXPECT_EQ(s.state().skipped_steps, 2);
  EXPECT_THROW(s.restore({0.5, 0, 0, true}), Error);
  EXPECT_THROW(s.restore({NAN, 0, 0, true}), Error);
  EXPECT_THROW(s.restore({8.0, -1, 0, true}), Error);
  LossScaler off(LossScaling::Off);
  off.restore({1024.0, 5, 1, true});  // an fp16 checkpoint continued in bf16
  EXPECT_EQ(off.scale(), 1.0);
  EXPECT_EQ(off.state().skipped_steps, 1);
  EXPECT_TRUE(off.update(true));
}

// ---- training with 16-bit storage ------------------------------------------------------------------

TrainConfig tiny_train(double lr) {
  TrainConfig tc;
  tc.global_batch = 16;
  tc.micro_batch = 8;
  tc.steps = 100;
  tc.adamw.lr = lr;
  tc.seed = 11;
  return tc;
}

std::vector<float> host(Backend& be, const Tensor& t) {
  std::vector<float> v(static_cast<std::size_t>(t.numel()));
  be.copy(Tensor{v.data(), DType::F32, {t.numel()}, Device::Host}, t.view({t.numel()}));
  return v;
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, r = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    d += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    r += double(b[i]) * b[i];
  }
  return std::sqrt(d / r);
}

// Losses of a few steps in 16-bit storage follow the fp32 run within the 16-bit tolerance, and the
// fp32 master weights keep updates a 16-bit parameter could not hold.
TEST(MixedPrecisionTraining, Bf16AndFp16FollowFp32AndKeepFp32MasterWeights) {
  SyntheticDataset data({1, 8, 8}, 4, 256, 7);
  auto run = [&](DType dt, std::vector<double>& losses, std::vector<float>* master) {
    auto be = make_backend("cpu", dt);
    ParallelContext ctx = make_single_context();
    attach_backend_comms(ctx, *be);
    Trainer t(*be, ctx, tiny_dit(1, 2, 2, 4), tiny_train(1e-3), data);
    for (int i = 0; i < 5; ++i) {
      const StepStats st = t.step();
      EXPECT_FALSE(st.skipped) << dtype_name(dt) << " step " << i;
      losses.push_back(st.loss);
    }
    if (master) *master = host(*be, t.optimizer().shard().master());
  };
  std::vector<double> l32, l16, lb16;
  std::vector<float> m32, mb16;
  run(DType::F32, l32, &m32);
  run(DType::BF16, lb16, &mb16);
  run(DType::F16, l16, nullptr);
  for (std::size_t i = 0; i < l32.size(); ++i) {
    EXPECT_NEAR(lb16[i], l32[i], 2e-2 * l32[i]) << "bf16 step " << i;
    EXPECT_NEAR(l16[i], l32[i], 2e-2 * l32[i]) << "fp16 step " << i;
  }
  const double err = rel_l2(mb16, m32);
  std::printf("bf16 master weights after 5 steps vs fp32: rel L2 %.2e\n", err);
  EXPECT_LE(err, 2e-2);
  std::size_t off_grid = 0;  // values a bf16 parameter cannot hold: the master is really fp32
  for (float v : mb16) off_grid += bf16_bits_to_float(float_to_bf16_bits(v)) != v;
  EXPECT_GT(off_grid, mb16.size() / 2) << "of " << mb16.size();
}

// 16-bit runs accumulate weight gradients across microbatches in fp32 (ParamSet::kGradDType):
// the gradients of one step over 32 microbatches of 1 image equal those of 1 microbatch of the same
// 32 images to the fp32 rule, and follow the fp32 run within the 16-bit rule. With 16-bit
// gradient buffers (kGradDType = BF16, measured) the first comparison gives rel L2 7.1e-3, which
// this test rejects.
TEST(MixedPrecisionTraining, GradientsAccumulateInFp32AcrossMicrobatches) {
  SyntheticDataset data({1, 8, 8}, 4, 256, 7);
  auto grads = [&](DType dt, int micro) {
    auto be = make_backend("cpu", dt);
    ParallelContext ctx = make_single_context();
    attach_backend_comms(ctx, *be);
    TrainConfig tc = tiny_train(1e-3);
    tc.global_batch = 32;
    tc.micro_batch = micro;
    Trainer t(*be, ctx, tiny_dit(1, 2, 2, 4), tc, data);
    t.step();  // the step leaves its accumulated gradients in the flat buffer
    EXPECT_EQ(t.model().params().flat_grads().dtype, DType::F32);
    return host(*be, t.model().params().flat_grads());
  };
  const std::vector<float> one = grads(DType::BF16, 32), many = grads(DType::BF16, 1);
  const double err = rel_l2(many, one);
  std::printf("bf16 gradients, 32 microbatches vs 1: rel L2 %.2e\n", err);
  EXPECT_LE(err, 1e-4);
  const std::vector<float> fp32 = grads(DType::F32, 1);
  const double vs32 = rel_l2(many, fp32);
  std::printf("bf16 gradients vs the fp32 run: rel L2 %.2e\n", vs32);
  EXPECT_LE(vs32, 2e-2);
  EXPECT_GT(rel_l2(one, std::vector<float>(one.size(), 0.f)), 0.5) << "the gradients are not all zero";
}

// An fp16 step whose scaled gradients overflow is skipped on every count: the parameters, moments
// and EMA stay as they were, the scale halves, and training continues once the scale fits.
TEST(MixedPrecisionTraining, Fp16OverflowSkipsTheStepAndHalvesTheScale) {
  SyntheticDataset data({1, 8, 8}, 4, 256, 7);
  auto be = make_backend("cpu", DType::F16);
  ParallelContext ctx = make_single_context();
  attach_backend_comms(ctx, *be);
  Trainer t(*be, ctx, tiny_dit(1, 2, 2, 4), tiny_train(1e-3), data);
  ASSERT_TRUE(t.loss_scaler().enabled());
  EXPECT_EQ(t.loss_scaler().scale(), 65536.0);
  const double huge = std::ldexp(1.0, 40);  // d(S x loss) far past fp16's 65504
  t.restore(t.state(), 0, {huge, 0, 0, true});
  const StageState before = t.state();
  const StepStats st = t.step();
  EXPECT_TRUE(st.skipped);
  EXPECT_EQ(st.loss_scale, huge);
  EXPECT_TRUE(std::isfinite(st.loss)) << "the forward pass is unaffected";
  EXPECT_EQ(t.loss_scaler().scale(), huge / 2);
  EXPECT_EQ(t.loss_scaler().state().skipped_steps, 1);
  const StageState after = t.state();
  EXPECT_EQ(after.model, before.model);
  EXPECT_EQ(after.exp_avg, before.exp_avg);
  EXPECT_EQ(after.exp_avg_sq, before.exp_avg_sq);
  EXPECT_EQ(after.ema, before.ema);

  int skipped = 1, steps = 1;
  StepStats applied;
  while ((applied = t.step()).skipped && steps < 80) ++skipped, ++steps;
  ++steps;
  std::printf("fp16 from scale 2^40: %d steps skipped, then applied at scale 2^%g\n", skipped,
              std::log2(applied.loss_scale));
  EXPECT_LT(steps, 80) << "the scale never came down to where the gradients fit";
  // Weight gradients accumulate in fp32 (ParamSet::kGradDType), so what bounds the scale is the
  // fp16 activation gradients d(S x loss)/dx: the applied step ran far below 2^40 with a finite norm.
  EXPECT_LE(applied.loss_scale, huge / 1024);
  EXPECT_TRUE(std::isfinite(applied.grad_norm));
  EXPECT_NE(t.state().model, before.model) << "the applied step changed the weights";
  EXPECT_EQ(t.loss_scaler().state().skipped_steps, skipped);
}

}  // namespace
}  // namespace dit
