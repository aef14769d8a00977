// The /distill group: knowledge distillation's loss terms (TinyFusion's masked KD) on the backend,
// as training takes them (Trainer::output_loss, TeacherStage::forward), against float64 numbers
// from the reference's training_losses_kd_rep. The whole batch runs on world rank 0; the other
// ranks wait for the report.
#include "verify/verify_common.h"

#include <string>
#include <vector>

#include "backend/backend.h"
#include "diffusion/losses.h"
#include "diffusion/noise_schedule.h"
#include "diffusion/objective.h"
#include "io/golden.h"

namespace dit::verify {

namespace {

// The group's shapes and weights, read and checked alike on every rank.
struct DistillGroup {
  std::int64_t n = 0;
  Shape image, out;            // (N, C, H, W) and (N, Co, H, W), Co = 2C with a learned variance
  std::vector<Shape> features;  // per pair, (N, T, D)
  bool learn_sigma = true;
  double output_weight = 0, feature_weight = 0, mask_sigma = 0;
  int steps = 0;
};

DistillGroup read_group(const GoldenFile& g) {
  const auto& f = g.h5();
  DistillGroup d;
  for (const char* a : {"output_weight", "feature_weight", "mask_sigma", "learn_sigma", "diffusion_steps"})
    DIT_CHECK(f.has_attr("/distill", a), g.path(), ": group /distill lacks the attribute '", a, "'");
  d.learn_sigma = f.attr_bool("/distill", "learn_sigma");
  d.output_weight = f.attr_double("/distill", "output_weight");
  d.feature_weight = f.attr_double("/distill", "feature_weight");
  d.mask_sigma = f.attr_double("/distill", "mask_sigma");
  const std::int64_t steps = f.attr_int("/distill", "diffusion_steps");
  DIT_CHECK(d.output_weight >= 0 && d.output_weight <= 1, g.path(), ": /distill output_weight = ", d.output_weight,
            ": expected a value in [0, 1] (the recipe's loss weighs 1 - output_weight)");
  DIT_CHECK(d.feature_weight >= 0 && d.mask_sigma >= 0, g.path(), ": /distill feature_weight = ", d.feature_weight,
            ", mask_sigma = ", d.mask_sigma, ": expected values >= 0");
  DIT_CHECK(steps >= 2 && steps <= 100000, g.path(), ": /distill diffusion_steps = ", steps,
            ": expected 2 to 100000");
  d.steps = static_cast<int>(steps);
  d.image = f.shape("/distill/x_start");
  DIT_CHECK(d.image.rank == 4 && d.image.numel() > 0, g.path(), ": /distill/x_start has shape ", d.image.str(),
            ", expected (N, C, H, W)");
  d.n = d.image.dims[0];
  d.out = {d.n, d.image.dims[1] * (d.learn_sigma ? 2 : 1), d.image.dims[2], d.image.dims[3]};
  const std::int64_t pairs = f.shape("/distill/student_layers").numel();
  DIT_CHECK(pairs >= 1 && f.shape("/distill/teacher_layers").numel() == pairs, g.path(),
            ": /distill/student_layers and teacher_layers must name the same number (>= 1) of feature pairs");
  for (std::int64_t k = 0; k < pairs; ++k) {
    const std::string fs = "/distill/fs/" + std::to_string(k);
    const Shape s = f.shape(fs);
    DIT_CHECK(s.rank == 3 && s.dims[0] == d.n && s.numel() > d.n, g.path(), ": ", fs, " has shape ", s.str(),
              ", expected (", d.n, ", T, D) with T x D > 1");
    d.features.push_back(s);
  }
  return d;
}

// Every dataset the check reads, with its shape (an error names the dataset).
void read_all(const GoldenFile& g, const DistillGroup& d) {
  const Shape per{d.n};
  for (const char* s : {"x_start", "noise"}) g.read(std::string("/distill/") + s, d.image);
  for (const char* s : {"out", "tout", "grad_out"}) g.read(std::string("/distill/") + s, d.out);
  for (const char* s : {"loss", "kd_loss", "gt", "feat_loss", "mse"}) g.read(std::string("/distill/") + s, per);
  if (d.learn_sigma)
    for (const char* s : {"vb_kd", "vb"}) g.read(std::string("/distill/") + s, per);
  for (std::size_t k = 0; k < d.features.size(); ++k)
    for (const char* s : {"/distill/fs/", "/distill/ft/", "/distill/grad_fs/"})
      g.read(s + std::to_string(k), d.features[k]);
  const auto sched = diffusion::create_diffusion({"", d.learn_sigma, d.steps});
  const auto t = g.h5().read_ints("/distill/t");
  DIT_CHECK(static_cast<std::int64_t>(t.size()) == d.n, g.path(), ": /distill/t must have ", d.n, " entries");
  for (auto v : t) sched.check_timestep(v, "/distill/t");
}

std::vector<double> column(const std::vector<float>& rows, int width, int col) {
  std::vector<double> out;
  for (std::size_t i = col; i < rows.size(); i += width) out.push_back(rows[i]);
  return out;
}

}  // namespace

void check_distill_group(const GoldenFile& g) { read_all(g, read_group(g)); }

void verify_distill(Backend& be, ParallelContext& ctx, const GoldenFile& g, Report& rep) {
  const DistillGroup d = read_group(g);
  const std::int64_t n = d.n, pairs = static_cast<std::int64_t>(d.features.size());
  const double target_weight = 1 - d.output_weight;
  std::vector<float> terms, kd, feat, grad_out;
  std::vector<std::vector<float>> grad_fs(pairs);
  if (ctx.world_rank == 0) {
    const auto sched = diffusion::create_diffusion({"", d.learn_sigma, d.steps});
    const math::LossKind kind = diffusion::loss_kind(diffusion::TrainObjective{}, d.learn_sigma);
    const std::vector<float> table = diffusion::loss_coef_table(sched);
    const auto t64 = g.h5().read_ints("/distill/t");
    const std::vector<std::int32_t> t(t64.begin(), t64.end());
    const DType dt = be.compute_dtype();
    Arena arena(be);
    auto put = [&](const std::vector<float>& host, Shape s, DType to) {
      Tensor x = arena.tensor(s, to);
      be.copy(x, Tensor{const_cast<float*>(host.data()), DType::F32, s, Device::Host});
      return x;
    };
    auto load = [&](const std::string& name, Shape s, DType to) { return put(g.read_f32(name, s), s, to); };
    const Tensor x0 = load("/distill/x_start", d.image, DType::F32);
    const Tensor noise = load("/distill/noise", d.image, DType::F32);
    const Tensor out = load("/distill/out", d.out, dt), tout = load("/distill/tout", d.out, dt);
    const Tensor ti = arena.tensor({n}, DType::I32);
    be.copy(ti, Tensor{const_cast<std::int32_t*>(t.data()), DType::I32, {n}, Device::Host});
    const std::int64_t rows = static_cast<std::int64_t>(table.size()) / math::kNumLossCoefs;
    const Tensor coefs = put(table, {rows, math::kNumLossCoefs}, DType::F32);
    const Tensor dout = arena.tensor(d.out, dt), loss_terms = arena.tensor({n, 3}, DType::F32),
                 kd_terms = arena.tensor({n, 2}, DType::F32), feat_terms = arena.tensor({n}, DType::F32);
    // Trainer::output_loss with seed 1: the recipe's loss writes dout, output KD adds to it.
    LossTensors io{.a = out, .grad = dout, .x0 = x0, .noise = noise, .t = ti, .coefs = coefs, .terms = loss_terms};
    be.sample_loss(diffusion_loss_fn(kind, x0, static_cast<float>(target_weight)), io);
    io.b = tout, io.terms = kd_terms;
    be.sample_loss(output_distill_fn(kind, x0, tout, static_cast<float>(d.output_weight)), io);
    // TeacherStage::forward: per pair, at seed x feature_weight / pairs.
    be.fill(feat_terms, 0.f);
    const float feature_scale = static_cast<float>(d.feature_weight / static_cast<double>(pairs));
    for (std::int64_t k = 0; k < pairs; ++k) {
      const Shape s = d.features[k];
      const std::string pair = std::to_string(k);
      const Tensor fs = load("/distill/fs/" + pair, s, dt), ft = load("/distill/ft/" + pair, s, dt);
      const Tensor dfs = arena.tensor(s, dt);
      be.sample_loss(feature_distill_fn(fs, d.mask_sigma, feature_scale),
                     {.a = fs, .b = ft, .grad = dfs, .terms = feat_terms});
      grad_fs[k] = host_copy(be, dfs);
    }
    terms = host_copy(be, loss_terms), kd = host_copy(be, kd_terms), feat = host_copy(be, feat_terms);
    grad_out = host_copy(be, dout);
    for (float& v : feat) v = static_cast<float>(v / static_cast<double>(pairs));
  }
  std::vector<double> loss, kd_loss, gt;
  for (std::size_t i = 0; i < feat.size(); ++i) {
    kd_loss.push_back(double(kd[2 * i]) + kd[2 * i + 1]);
    gt.push_back(double(terms[3 * i + 1]) + (d.learn_sigma ? terms[3 * i + 2] : 0.0));
    loss.push_back(d.output_weight * kd_loss.back() + target_weight * gt.back() + d.feature_weight * feat[i]);
  }
  const Shape per{n};
  rep.full("distill/loss", loss, g.read("/distill/loss", per));
  rep.full("distill/kd_loss", kd_loss, g.read("/distill/kd_loss", per));
  rep.full("distill/gt", gt, g.read("/distill/gt", per));
  rep.full("distill/feat_loss", feat, g.read("/distill/feat_loss", per));
  rep.full("distill/mse", column(terms, 3, 1), g.read("/distill/mse", per));
  if (d.learn_sigma) {
    rep.full("distill/vb_kd", column(kd, 2, 1), g.read("/distill/vb_kd", per));
    rep.full("distill/vb", column(terms, 3, 2), g.read("/distill/vb", per));
  }
  rep.full("distill/grad_out", grad_out, g.read("/distill/grad_out", d.out));
  for (std::int64_t k = 0; k < pairs; ++k) {
    const std::string name = "distill/grad_fs/" + std::to_string(k);
    rep.full(name, grad_fs[k], g.read("/" + name, d.features[k]));
  }
}

}  // namespace dit::verify
