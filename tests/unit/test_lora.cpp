// LoRA adapters on linear layers (layers/linear.h, layers/lora.h): the forward and every gradient
// against a float64 reference from the math; the tp split of linear.h (column- and row-parallel
// halves computed apart add up to the whole layer, the whole factor's gradient being the partial
// sum the trainer all-reduces); the declared adapters' names, splits and initialization; a stage
// with fresh adapters (B = 0) is the stage without them, bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "backend/backend.h"
#include "engine/dit_pipeline.h"
#include "engine/global_tensors.h"
#include "layers/dit_stage.h"
#include "layers/lora.h"
#include "tiny_model.h"
#include "value_checks.h"

namespace dit {
namespace {

using ref::Vec;
using i64 = std::int64_t;

std::vector<float> randu(i64 n, std::uint32_t seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = d(g);
  return v;
}

Tensor host(std::vector<float>& v, Shape s) { return Tensor{v.data(), DType::F32, s, Device::Host}; }

// C (m, n) = op(A) op(B) in double, A (m, k) or (k, m), B (k, n) or (n, k).
Vec mm(const std::vector<float>& a, bool ta, const std::vector<float>& b, bool tb, i64 m, i64 n, i64 k) {
  Vec c(static_cast<std::size_t>(m * n), 0.0);
  for (i64 i = 0; i < m; ++i)
    for (i64 j = 0; j < n; ++j) {
      double s = 0;
      for (i64 p = 0; p < k; ++p) s += double(ta ? a[p * m + i] : a[i * k + p]) * double(tb ? b[j * k + p] : b[p * n + j]);
      c[i * n + j] = s;
    }
  return c;
}
std::vector<float> to_float(const Vec& v) { return std::vector<float>(v.begin(), v.end()); }

// One linear layer (out, in) with a rank-r adapter, its inputs and output gradient, on the host.
struct Layer {
  i64 rows, in, out, r;
  float scale;
  std::vector<float> w, b, a, bb, x, dy;                     // values
  std::vector<float> dw, db, da, dbb, dx, y, t, u;           // outputs and scratch
  Layer(i64 rows_, i64 in_, i64 out_, i64 r_, float s, std::uint32_t seed)
      : rows(rows_), in(in_), out(out_), r(r_), scale(s), w(randu(out * in, seed)), b(randu(out, seed + 1)),
        a(randu(r * in, seed + 2)), bb(randu(out * r, seed + 3)), x(randu(rows * in, seed + 4)),
        dy(randu(rows * out, seed + 5)), dw(out * in), db(out), da(r * in), dbb(out * r), dx(rows * in),
        y(rows * out), t(rows * r), u(rows * r) {}
  LinearParams params() {
    LinearParams p{host(w, {out, in}), host(b, {out}), host(dw, {out, in}), host(db, {out}), {}};
    p.lora = {host(a, {r, in}), host(bb, {out, r}), host(da, {r, in}), host(dbb, {out, r}), scale,
              host(t, {rows, r}), host(u, {rows, r})};
    return p;
  }
  // Forward and the fused backward on the CPU backend (dx overwritten, grads accumulated from 0).
  void run(Backend& be, Bias bias) {
    const LinearParams p = params();
    linear_fwd(be, p, host(x, {rows, in}), host(y, {rows, out}), bias);
    linear_bwd(be, p, host(x, {rows, in}), host(dy, {rows, out}), host(dx, {rows, in}), Accumulate::Overwrite, bias);
  }
};

TEST(LoraLinear, ForwardAndGradientsMatchTheFloat64Reference) {
  auto be = make_backend("cpu", DType::F32);
  Layer l(12, 10, 7, 3, 2.f, 11);
  l.run(*be, Bias::Add);
  // y = x W^T + b + s (x A^T) B^T;  t = x A^T;  dB = s dy^T t;  u = dy B;  dA = s u^T x;
  // dx = dy W + s u A;  dW = dy^T x;  db = sum_rows dy.
  const Vec t = mm(l.x, false, l.a, true, l.rows, l.r, l.in);
  const Vec u = mm(l.dy, false, l.bb, false, l.rows, l.r, l.out);
  Vec y = mm(l.x, false, l.w, true, l.rows, l.out, l.in);
  const Vec yl = mm(to_float(t), false, l.bb, true, l.rows, l.out, l.r);
  for (i64 i = 0; i < l.rows; ++i)
    for (i64 j = 0; j < l.out; ++j) y[i * l.out + j] += l.b[j] + l.scale * yl[i * l.out + j];
  Vec dbb = mm(l.dy, true, to_float(t), false, l.out, l.r, l.rows), da = mm(to_float(u), true, l.x, false, l.r, l.in, l.rows);
  for (double& v : dbb) v *= l.scale;
  for (double& v : da) v *= l.scale;
  Vec dx = mm(l.dy, false, l.w, false, l.rows, l.in, l.out);
  const Vec dxl = mm(to_float(u), false, l.a, false, l.rows, l.in, l.r);
  for (std::size_t i = 0; i < dx.size(); ++i) dx[i] += l.scale * dxl[i];
  Vec db(static_cast<std::size_t>(l.out), 0.0);
  for (i64 i = 0; i < l.rows; ++i)
    for (i64 j = 0; j < l.out; ++j) db[j] += l.dy[i * l.out + j];
  const double tol = ref::tolerance(DType::F32);
  check_values("y", l.y, y, tol);
  check_values("dx", l.dx, dx, tol);
  check_values("dW", l.dw, mm(l.dy, true, l.x, false, l.out, l.in, l.rows), tol);
  check_values("db", l.db, db, tol);
  check_values("dA", l.da, da, tol);
  check_values("dB", l.dbb, dbb, tol);
}

// Rows [r0, r0 + n) of a (R, C) matrix, or columns [c0, c0 + n).
std::vector<float> row_slice(const std::vector<float>& m, i64 cols, i64 r0, i64 n) {
  return {m.begin() + r0 * cols, m.begin() + (r0 + n) * cols};
}
std::vector<float> col_slice(const std::vector<float>& m, i64 rows, i64 cols, i64 c0, i64 n) {
  std::vector<float> s;
  for (i64 i = 0; i < rows; ++i) s.insert(s.end(), m.begin() + i * cols + c0, m.begin() + i * cols + c0 + n);
  return s;
}
double rel(const std::vector<float>& got, const std::vector<float>& want) {
  return ref::rel_l2(got, Vec(want.begin(), want.end()));
}

// Column-parallel: each of two ranks holds half of W's and B's rows and all of A; its outputs are
// its half of y's columns, its dB its half of dB; dA and dx are halves of a sum over the ranks.
TEST(LoraLinear, ColumnParallelHalvesMakeTheWholeLayer) {
  auto be = make_backend("cpu", DType::F32);
  Layer whole(8, 6, 10, 2, 2.f, 21);
  whole.run(*be, Bias::Skip);
  std::vector<float> da(whole.da.size(), 0.f), dx(whole.dx.size(), 0.f);
  for (int k = 0; k < 2; ++k) {
    Layer half(8, 6, 5, 2, 2.f, 21);
    half.w = row_slice(whole.w, 6, 5 * k, 5), half.bb = row_slice(whole.bb, 2, 5 * k, 5);
    half.a = whole.a, half.x = whole.x, half.dy = col_slice(whole.dy, 8, 10, 5 * k, 5);
    half.run(*be, Bias::Skip);
    EXPECT_LT(rel(half.y, col_slice(whole.y, 8, 10, 5 * k, 5)), 1e-6) << "rank " << k << " y";
    EXPECT_LT(rel(half.dbb, row_slice(whole.dbb, 2, 5 * k, 5)), 1e-6) << "rank " << k << " dB";
    for (std::size_t i = 0; i < da.size(); ++i) da[i] += half.da[i];
    for (std::size_t i = 0; i < dx.size(); ++i) dx[i] += half.dx[i];
  }
  EXPECT_LT(rel(da, whole.da), 1e-6) << "dA: the tp sum of the ranks' parts";
  EXPECT_LT(rel(dx, whole.dx), 1e-6) << "dx: the tp sum of the ranks' parts";
}

// Row-parallel: each rank holds half of W's and A's columns and all of B; the outputs sum to y,
// dB is the sum of the ranks' parts, dA and dx are each rank's columns.
TEST(LoraLinear, RowParallelHalvesMakeTheWholeLayer) {
  auto be = make_backend("cpu", DType::F32);
  Layer whole(8, 10, 6, 2, 2.f, 31);
  whole.run(*be, Bias::Skip);
  std::vector<float> y(whole.y.size(), 0.f), dbb(whole.dbb.size(), 0.f);
  for (int k = 0; k < 2; ++k) {
    Layer half(8, 5, 6, 2, 2.f, 31);
    half.w = col_slice(whole.w, 6, 10, 5 * k, 5), half.a = col_slice(whole.a, 2, 10, 5 * k, 5);
    half.bb = whole.bb, half.x = col_slice(whole.x, 8, 10, 5 * k, 5), half.dy = whole.dy;
    half.run(*be, Bias::Skip);
    EXPECT_LT(rel(half.da, col_slice(whole.da, 2, 10, 5 * k, 5)), 1e-6) << "rank " << k << " dA";
    EXPECT_LT(rel(half.dx, col_slice(whole.dx, 8, 10, 5 * k, 5)), 1e-6) << "rank " << k << " dx";
    for (std::size_t i = 0; i < y.size(); ++i) y[i] += half.y[i];
    for (std::size_t i = 0; i < dbb.size(); ++i) dbb[i] += half.dbb[i];
  }
  EXPECT_LT(rel(y, whole.y), 1e-6) << "y: the tp sum of the ranks' partial outputs";
  EXPECT_LT(rel(dbb, whole.dbb), 1e-6) << "dB: the tp sum of the ranks' parts";
}

TEST(LoraDeclare, EveryBlockLinearGetsBothFactorsSplitAsItsWeight) {
  const DiTConfig cfg = tiny_dit(1, 2, 4, 10);
  const std::vector<ParamSpec> model = DiTStage::declare(cfg, StageLayout::whole(cfg));
  const std::vector<ParamSpec> lora = declare_lora(model, 4);
  ASSERT_EQ(lora.size(), 2u * 5u * 2u) << "5 linears x 2 blocks x (A, B)";
  for (const ParamSpec& s : lora) {
    EXPECT_EQ(s.name.rfind("blocks.", 0), 0u) << s.name << ": only block linears are adapted";
    const bool is_a = s.name.ends_with(".lora_a");
    const std::string base = s.name.substr(0, s.name.size() - 7) + ".weight";
    const auto w = std::find_if(model.begin(), model.end(), [&](const ParamSpec& m) { return m.name == base; });
    ASSERT_NE(w, model.end()) << s.name;
    const Shape want = is_a ? Shape{4, w->global[1]} : Shape{w->global[0], 4};
    EXPECT_EQ(s.global, want) << s.name;
    EXPECT_EQ(s.init, is_a ? Init::KaimingUniform : Init::Zero) << s.name;
    const Split whole_side = is_a ? Split::Row : Split::Column;  // the side A or B shares with W
    EXPECT_EQ(s.split, w->split == whole_side ? whole_side : Split::Replicated) << s.name;
    EXPECT_EQ(lora_grad_is_tp_partial(s), s.split == Split::Replicated) << s.name;
    if (!is_a && w->split == Split::Column) EXPECT_EQ(s.groups, w->groups) << s.name << ": qkv's B splits by q, k, v";
  }
  // A is nn.Linear's default initialization: U(-1/sqrt(in), 1/sqrt(in)), filling that range.
  std::vector<float> a;
  const ParamSpec& qkv_a = lora.front();
  qkv_a.initialize(5, a);
  const float bound = 1.f / std::sqrt(float(qkv_a.global[1]));
  float lo = 0, hi = 0;
  for (float v : a) lo = std::min(lo, v), hi = std::max(hi, v);
  EXPECT_LE(hi, bound);
  EXPECT_GE(lo, -bound);
  EXPECT_GT(hi, 0.9f * bound) << "the draw does not reach its bound";
}

// Fresh adapters (B = 0) change nothing: the stage's output with them attached is the stage's own.
TEST(LoraStage, FreshAdaptersAreTheModel) {
  auto be = make_backend("cpu", DType::F32);
  const DiTConfig cfg = tiny_dit(1, 2, 4, 10);
  SelfComm tp;
  DiTStage plain(*be, cfg, StageLayout::whole(cfg), tp), adapted(*be, cfg, StageLayout::whole(cfg), tp);
  plain.params().initialize(3);
  adapted.params().initialize(3);
  // adaLN-Zero starts at zero; give every weight a value so each adapter's input matters.
  std::vector<float> w = randu(plain.params().padded_numel(), 9);
  for (DiTStage* s : {&plain, &adapted}) be->copy(s->params().flat_values(), host(w, {i64(w.size())}));
  ParamSet lora(*be, declare_lora(adapted.params().specs(), 4), 1, 0);
  lora.initialize(3);
  const i64 n = 2, rows = n * cfg.num_patches();
  std::vector<float> t(rows * 4), u(rows * 4);
  adapted.attach_lora(lora, 2.f, host(t, {rows, 4}), host(u, {rows, 4}));
  const i64 img = cfg.in_channels * cfg.input_size * cfg.input_size;
  std::vector<float> images = randu(n * img, 4), steps = {5.f, 600.f};
  std::vector<std::int32_t> labels = {1, 7};
  auto output = [&](const DiTStage& s) {
    Arena saved(*be), scratch(*be);
    StageInputs in;
    upload_stage_inputs(*be, cfg, n, {images.data(), steps.data(), labels.data()}, in, saved);
    return host_copy(*be, s.forward(in, saved, scratch).final.out);
  };
  const std::vector<float> base = output(plain);
  EXPECT_EQ(output(adapted), base);
  // A nonzero B is applied: the output moves.
  std::vector<float> trained = randu(lora.padded_numel(), 12);
  be->copy(lora.flat_values(), host(trained, {i64(trained.size())}));
  EXPECT_GT(rel(output(adapted), base), 1e-3) << "trained adapters left the output as it was";
}

}  // namespace
}  // namespace dit
