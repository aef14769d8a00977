// Backend conformance for the training step's own primitives against the host: keyed noise equals
// the host Philox stream, q_sample and the diffusion loss follow the float64 reference
// (diffusion/losses.h) by the tolerance rule, and the one-pass optimizer primitives equal the
// separate ones. Every backend of the build; "cuda*" skip, saying why, without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "backend/backend.h"
#include "core/philox.h"
#include "diffusion/losses.h"
#include "backend_params.h"
#include "reference_ops.h"

namespace dit {
namespace {

using Vec = std::vector<double>;

class TrainOps : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::string why;
    if (!backend_available(GetParam(), &why))
      GTEST_SKIP() << "backend '" << GetParam() << "' is not available: " << why;
    be_ = make_backend(GetParam());
    arena_ = std::make_unique<Arena>(*be_);
  }
  Backend& be() { return *be_; }
  DType dt() const { return be_->compute_dtype(); }
  Tensor upload(const std::vector<float>& v, Shape s, DType t) {
    Tensor x = arena_->tensor(s, t);
    be().copy(x, Tensor{const_cast<float*>(v.data()), DType::F32, s, Device::Host});
    return x;
  }
  Tensor upload_ints(const std::vector<std::int32_t>& v) {
    const Shape s{static_cast<std::int64_t>(v.size())};
    Tensor x = arena_->tensor(s, DType::I32);
    be().copy(x, Tensor{const_cast<std::int32_t*>(v.data()), DType::I32, s, Device::Host});
    return x;
  }
  std::vector<float> download(const Tensor& t) {
    std::vector<float> h(static_cast<std::size_t>(t.numel()));
    be().copy(Tensor{h.data(), DType::F32, t.shape, Device::Host}, t);
    be().synchronize();
    return h;
  }
  Tensor alloc(Shape s, DType t) { return arena_->tensor(s, t); }

 private:
  std::unique_ptr<Backend> be_;
  std::unique_ptr<Arena> arena_;
};

std::vector<float> normals(std::size_t n, std::uint64_t stream, double scale = 1.0) {
  Philox rng(5, RngPurpose::Test, 0, stream);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(scale * rng.normal());
  return v;
}

// Row i of the noise is the host's Philox stream (seed, Noise, step, first + i), number for number.
TEST_P(TrainOps, PhiloxNormalIsTheHostStream) {
  const std::int64_t n = 3, p = 77;  // odd: a Box-Muller pair split across rows is not allowed
  const std::uint64_t first = (std::uint64_t{1} << 33) + 5, step = 7;
  Tensor noise = alloc({n, p}, DType::F32);
  be().philox_normal(11, static_cast<std::uint32_t>(RngPurpose::Noise), step, first, noise);
  const std::vector<float> got = download(noise);
  for (std::int64_t i = 0; i < n; ++i) {
    Philox rng(11, RngPurpose::Noise, step, first + i);
    for (std::int64_t j = 0; j < p; ++j) {
      const float want = rng.normal();
      ASSERT_EQ(got[i * p + j], want) << "row " << i << " element " << j;
      ASSERT_EQ(philox_normal_at(11, static_cast<std::uint32_t>(RngPurpose::Noise), step, first + i, j), want);
    }
  }
}

// The loss, its per-sample terms and d mean(loss) / d out against diffusion::training_losses in
// float64, at schedule indices including 0 (the decoder likelihood) and data at the +-1 edges.
TEST_P(TrainOps, DiffusionLossFollowsTheFloat64Reference) {
  for (bool learn_sigma : {true, false}) {
    const auto sched = diffusion::create_diffusion({"", learn_sigma, 1000});
    const std::int64_t n = 5, c = 2, h = 4, w = 4, p = c * h * w, co = learn_sigma ? 2 * c : c;
    std::vector<float> x0 = normals(n * p, 1, 0.6), noise = normals(n * p, 2), out = normals(n * co * h * w, 3);
    for (std::int64_t j = 0; j < 6; ++j) x0[j] = j % 2 ? 1.f : -1.f;  // the open tail bins
    const std::vector<std::int32_t> t = {0, 1, 500, 999, 0};
    const float scale = 3.f;
    const auto table = diffusion::loss_coef_table(sched);
    Tensor tt = upload_ints(t), coefs = upload(table, {1000, math::kNumLossCoefs}, DType::F32);
    Tensor tx0 = upload(x0, {n, c, h, w}, DType::F32), tnoise = upload(noise, {n, c, h, w}, DType::F32);
    Tensor tout = upload(out, {n, co, h, w}, dt());
    const std::vector<float> held = download(tout);  // the output as the backend holds it
    Tensor dout = alloc({n, co, h, w}, dt()), terms = alloc({n, 3}, DType::F32);
    math::LossKind kind;
    kind.variance = learn_sigma ? math::LossVariance::Learned : math::LossVariance::Fixed;
    be().sample_loss(diffusion_loss_fn(kind, tx0, scale),
                     {.a = tout, .grad = dout, .x0 = tx0, .noise = tnoise, .t = tt, .coefs = coefs, .terms = terms});
    const Vec o64(held.begin(), held.end()), x64(x0.begin(), x0.end()), e64(noise.begin(), noise.end());
    const std::vector<std::int64_t> t64(t.begin(), t.end());
    const auto ref = diffusion::training_losses(sched, {n, c, h, w}, {o64, x64, e64, t64});
    const std::vector<float> got = download(terms), g = download(dout);
    Vec loss, mse, vb, grad;
    for (std::int64_t i = 0; i < n; ++i) {
      loss.push_back(got[3 * i]), mse.push_back(got[3 * i + 1]), vb.push_back(got[3 * i + 2]);
    }
    for (float v : g) grad.push_back(v / scale);
    const double tol = ref::tolerance(dt());
    const std::string what = learn_sigma ? " (learned variance)" : " (fixed variance)";
    EXPECT_LE(ref::rel_l2(loss, ref.loss), tol) << "loss" << what;
    EXPECT_LE(ref::rel_l2(mse, ref.mse), tol) << "mse" << what;
    if (learn_sigma) EXPECT_LE(ref::rel_l2(vb, ref.vb), tol) << "vb" << what;
    EXPECT_LE(ref::rel_l2(grad, ref.grad_model_output), tol) << "grad" << what;
    std::printf("    diffusion loss%s: loss %.2e, grad %.2e (tol %.0e)\n", what.c_str(),
                ref::rel_l2(loss, ref.loss), ref::rel_l2(grad, ref.grad_model_output), tol);
  }
}

// Min-SNR-gamma: the MSE term and its gradient scaled by min(SNR, 5) / SNR of each sample's t
// (the VB term unweighted), against the float64 reference's terms times diffusion::min_snr_weight.
TEST_P(TrainOps, MinSnrWeightedLossFollowsTheFloat64Reference) {
  const auto sched = diffusion::create_diffusion({"", true, 1000});
  const std::int64_t n = 4, c = 2, h = 4, w = 4, p = c * h * w;
  const std::vector<float> x0 = normals(n * p, 11, 0.6), noise = normals(n * p, 12), out = normals(n * 2 * p, 13);
  const std::vector<std::int32_t> t = {3, 100, 500, 999};
  const auto table = diffusion::loss_coef_table(sched, {diffusion::LossWeight::MinSnr, 5.0});
  Tensor tout = upload(out, {n, 2 * c, h, w}, dt());
  const std::vector<float> held = download(tout);
  Tensor dout = alloc({n, 2 * c, h, w}, dt()), terms = alloc({n, 3}, DType::F32);
  math::LossKind kind;
  kind.variance = math::LossVariance::Learned;
  kind.weighting = math::LossWeighting::Table;
  const Tensor tx0 = upload(x0, {n, c, h, w}, DType::F32);
  be().sample_loss(diffusion_loss_fn(kind, tx0, 1.f), {.a = tout,
                                                       .grad = dout,
                                                       .x0 = tx0,
                                                       .noise = upload(noise, {n, c, h, w}, DType::F32),
                                                       .t = upload_ints(t),
                                                       .coefs = upload(table, {1000, math::kNumLossCoefs}, DType::F32),
                                                       .terms = terms});
  const Vec o64(held.begin(), held.end()), x64(x0.begin(), x0.end()), e64(noise.begin(), noise.end());
  const std::vector<std::int64_t> t64(t.begin(), t.end());
  const auto ref = diffusion::training_losses(sched, {n, c, h, w}, {o64, x64, e64, t64});
  Vec loss, grad = ref.grad_model_output, got_grad;
  for (std::int64_t i = 0; i < n; ++i) {
    const double wi = diffusion::min_snr_weight(sched, t[i], 5.0);
    EXPECT_LT(wi, 1.0 + 1e-12);
    loss.push_back(wi * ref.mse[i] + ref.vb[i]);
    for (std::int64_t j = 0; j < p; ++j) grad[i * 2 * p + j] *= wi;  // the eps channels only
  }
  const std::vector<float> got = download(terms), g = download(dout);
  Vec got_loss;
  for (std::int64_t i = 0; i < n; ++i) got_loss.push_back(got[3 * i]);
  for (float v : g) got_grad.push_back(v);
  EXPECT_LE(ref::rel_l2(got_loss, loss), ref::tolerance(dt()));
  EXPECT_LE(ref::rel_l2(got_grad, grad), ref::tolerance(dt()));
}

// The flow loss (SiT's velocity MSE, with and without LightningDiT's cosine term) and its
// gradient against diffusion::flow_training_losses; x_t from q_sample on one row per sample.
TEST_P(TrainOps, FlowLossFollowsTheFloat64Reference) {
  const std::int64_t n = 3, c = 4, h = 4, w = 4, p = c * h * w;
  const std::vector<float> x1 = normals(n * p, 21, 0.7), x0 = normals(n * p, 22), out = normals(n * p, 23);
  const Vec t = {0.03, 0.5, 0.97};
  const auto rows = diffusion::flow_coef_rows(t);
  const std::vector<std::int32_t> idx = {0, 1, 2};
  for (auto cosine : {diffusion::CosineTerm::No, diffusion::CosineTerm::Yes}) {
    diffusion::TrainObjective o;
    o.objective = diffusion::Objective::Flow;
    o.cosine = cosine;
    Tensor tout = upload(out, {n, c, h, w}, dt());
    const std::vector<float> held = download(tout);
    Tensor dout = alloc({n, c, h, w}, dt()), terms = alloc({n, 3}, DType::F32);
    const float scale = 2.f;
    const Tensor data = upload(x1, {n, c, h, w}, DType::F32);
    be().sample_loss(diffusion_loss_fn(diffusion::loss_kind(o, false), data, scale),
                     {.a = tout,
                      .grad = dout,
                      .x0 = data,
                      .noise = upload(x0, {n, c, h, w}, DType::F32),
                      .t = upload_ints(idx),
                      .coefs = upload(rows, {n, math::kNumLossCoefs}, DType::F32),
                      .terms = terms});
    const auto ref = diffusion::flow_training_losses({n, c, h, w}, {Vec(held.begin(), held.end()),
                                                                    Vec(x1.begin(), x1.end()), Vec(x0.begin(), x0.end())},
                                                     cosine);
    const std::vector<float> got = download(terms), g = download(dout);
    Vec loss, mse, cos, grad;
    for (std::int64_t i = 0; i < n; ++i)
      loss.push_back(got[3 * i]), mse.push_back(got[3 * i + 1]), cos.push_back(got[3 * i + 2]);
    for (float v : g) grad.push_back(v / scale);
    const double tol = ref::tolerance(dt());
    EXPECT_LE(ref::rel_l2(loss, ref.loss), tol);
    EXPECT_LE(ref::rel_l2(mse, ref.mse), tol);
    if (cosine == diffusion::CosineTerm::Yes) EXPECT_LE(ref::rel_l2(cos, ref.cos), tol);
    EXPECT_LE(ref::rel_l2(grad, ref.grad_model_output), tol);
    // q_sample with the flow rows is the linear path t x1 + (1 - t) x0.
    Tensor xt = alloc({n, c, h, w}, dt());
    be().q_sample(upload(x1, {n, c, h, w}, DType::F32), upload(x0, {n, c, h, w}, DType::F32), upload_ints(idx),
                  upload(rows, {n, math::kNumLossCoefs}, DType::F32), xt);
    const std::vector<float> xg = download(xt);
    EXPECT_LE(ref::rel_l2(Vec(xg.begin(), xg.end()),
                          diffusion::flow_xt({n, c, h, w}, Vec(x1.begin(), x1.end()), Vec(x0.begin(), x0.end()), t)),
              tol);
  }
}

// Every per-sample loss is checked once, against its shape(): a tensor of the wrong size is one
// message naming the loss and the tensors, whatever the backend.
TEST_P(TrainOps, SampleLossRefusesTensorsThatDoNotFit) {
  const std::int64_t n = 2, c = 1, h = 4, w = 4;
  const std::vector<float> zeros(n * 2 * c * h * w, 0.f);
  const Tensor x0 = upload(zeros, {n, c, h, w}, DType::F32), out = upload(zeros, {n, 2 * c, h, w}, dt());
  const Tensor dout = alloc({n, 2 * c, h, w}, dt()), terms = alloc({n, 3}, DType::F32);
  math::LossKind kind;  // fixed variance: the output must have C channels, not 2C
  try {
    be().sample_loss(diffusion_loss_fn(kind, x0, 1.f), {.a = out, .grad = dout, .x0 = x0, .noise = x0,
                                                        .t = upload_ints({0, 1}), .terms = terms});
    FAIL() << "an output of 2C channels was taken for a fixed-variance loss";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("diffusion loss (epsilon)"), std::string::npos) << e.what();
  }
  const Tensor fs = alloc({n, 3, 5}, dt()), small = alloc({n, 3, 4}, dt()), fterms = alloc({n}, DType::F32);
  EXPECT_THROW(be().sample_loss(feature_distill_fn(fs, 1.0, 1.f), {.a = fs, .b = small, .grad = fs, .terms = fterms}),
               Error);
}

TEST_P(TrainOps, QSampleFollowsTheFloat64Reference) {
  const auto sched = diffusion::create_diffusion({"", true, 1000});
  const std::int64_t n = 4, p = 24;
  const std::vector<float> x0 = normals(n * p, 4), noise = normals(n * p, 5);
  const std::vector<std::int32_t> t = {0, 17, 640, 999};
  Tensor xt = alloc({n, p}, dt());
  be().q_sample(upload(x0, {n, p}, DType::F32), upload(noise, {n, p}, DType::F32), upload_ints(t),
                upload(diffusion::loss_coef_table(sched), {1000, math::kNumLossCoefs}, DType::F32), xt);
  const auto want = diffusion::q_sample(sched, Vec(x0.begin(), x0.end()),
                                        std::vector<std::int64_t>(t.begin(), t.end()),
                                        Vec(noise.begin(), noise.end()));
  const std::vector<float> got = download(xt);
  EXPECT_LE(ref::rel_l2(Vec(got.begin(), got.end()), want), ref::tolerance(dt()));
}

// The fused AdamW + EMA (+ storage copy) pass equals AdamW then EMA then the copy, and the ranged
// sum of squares equals the sums of its ranges.
TEST_P(TrainOps, FusedOptimizerPassEqualsTheSeparateSteps) {
  const std::int64_t n = 1000;
  const std::vector<float> p0 = normals(n, 6), g = normals(n, 7), e0 = normals(n, 8);
  math::AdamWParams h{1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 0.1f, 0.001f, 0.5f};
  auto fresh = [&](Tensor& master, Tensor& m, Tensor& v, Tensor& ema) {
    master = upload(p0, {n}, DType::F32), ema = upload(e0, {n}, DType::F32);
    m = upload(std::vector<float>(n, 0.1f), {n}, DType::F32);
    v = upload(std::vector<float>(n, 0.2f), {n}, DType::F32);
  };
  Tensor m1, m2, v1, v2, ma1, ma2, e1, e2;
  fresh(ma1, m1, v1, e1);
  fresh(ma2, m2, v2, e2);
  Tensor grad = upload(g, {n}, DType::F32), param = alloc({n}, dt());
  be().adamw_step(ma1, grad, m1, v1, h);
  be().ema_step(e1, ma1, 0.99f);
  be().adamw_ema_step(ma2, grad, m2, v2, e2, dt() == DType::F32 ? Tensor{} : param, h, 0.99f);
  EXPECT_EQ(download(ma2), download(ma1));
  EXPECT_EQ(download(m2), download(m1));
  EXPECT_EQ(download(v2), download(v1));
  EXPECT_EQ(download(e2), download(e1));
  if (dt() != DType::F32) {
    Tensor want = alloc({n}, dt());
    be().copy(want, ma1);
    EXPECT_EQ(download(param), download(want));
  }
  const std::vector<std::int32_t> ranges = {3, 10, 10, 400, 700, 1000};
  Tensor tr = upload_ints(ranges);
  const double got = be().sum_squares_ranges(grad, tr.view({3, 2}));
  double want = 0;
  for (std::size_t k = 0; k < ranges.size(); k += 2)
    for (std::int32_t i = ranges[k]; i < ranges[k + 1]; ++i) want += double(g[i]) * g[i];
  EXPECT_NEAR(got, want, 1e-6 * want);
}

INSTANTIATE_TEST_SUITE_P(Backends, TrainOps, all_backends(), backend_test_name);

}  // namespace
}  // namespace dit
