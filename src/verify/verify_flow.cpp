// The golden groups of the recipes beside DiT's: the flow loss on given (x1, noise, t), the
// logit-normal timesteps, one step of each flow sampler with guidance, and Min-SNR weights, each
// computed the way training and sampling compute them (see verify_common.h).
#include <algorithm>
#include <numeric>

#include "verify/verify_common.h"
#include "diffusion/sampling.h"

namespace dit::verify {

namespace {

std::string attr_text(const GoldenFile& g, const char* name, const std::string& absent) {
  return g.h5().has_attr("/config", name) ? g.h5().attr_string("/config", name) : absent;
}
double attr_real(const GoldenFile& g, const char* name, double absent) {
  return g.h5().has_attr("/config", name) ? g.h5().attr_double("/config", name) : absent;
}

template <class E, std::size_t N>
E attr_choice(const GoldenFile& g, const char* name, const Named<E> (&table)[N], E absent) {
  if (!g.h5().has_attr("/config", name)) return absent;
  const std::string v = g.h5().attr_string("/config", name);
  const auto e = value_of(table, v);
  DIT_CHECK(e.has_value(), g.path(), ": /config ", name, " = \"", v, "\": expected one of ", names_of(table));
  return *e;
}

// The file's (scalar) float64 dataset.
double read_scalar(const GoldenFile& g, const std::string& path) { return g.read(path, {}).at(0); }

// x_t = t x1 + (1 - t) x0 on the backend, as training forms it (Backend::q_sample with one
// flow row per sample), returned to the host in fp32.
std::vector<float> backend_flow_xt(Backend& be, const DiTConfig& cfg, const std::vector<double>& x1,
                                   const std::vector<double>& x0, const std::vector<double>& t) {
  const std::int64_t n = static_cast<std::int64_t>(t.size());
  Arena arena(be);
  auto put = [&](const void* host, DType host_dt, Shape s, DType dt) {
    Tensor x = arena.tensor(s, dt);
    be.copy(x, Tensor{const_cast<void*>(host), host_dt, s, Device::Host});
    return x;
  };
  const Shape img = image_shape(cfg, n, cfg.in_channels);
  const std::vector<float> a = to_f32(x1), b = to_f32(x0), rows = diffusion::flow_coef_rows(t);
  std::vector<std::int32_t> idx(static_cast<std::size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  const Tensor xt = arena.tensor(img, be.compute_dtype());
  be.q_sample(put(a.data(), DType::F32, img, DType::F32), put(b.data(), DType::F32, img, DType::F32),
              put(idx.data(), DType::I32, {n}, DType::I32),
              put(rows.data(), DType::F32, {n, math::kNumLossCoefs}, DType::F32), xt);
  return host_copy(be, xt);
}

// The velocity at (x, t) as the sampler computes it: the conditional rows and, where the noise
// level 1 - t lies in the guidance interval, the null-label rows, combined by cfg_combine.
struct Guidance {
  double scale = 1.0;
  std::int64_t channels = 3;
  double t_min = 0.0, t_max = 1.0;  // noise levels: LightningDiT's cfg_interval_start s gives t_max = 1 - s
};
std::vector<double> guided_velocity(Runner& run, const DiTConfig& cfg, const Guidance& gd, const std::vector<double>& x,
                                    double t, const std::vector<std::int32_t>& y) {
  const std::int64_t n = static_cast<std::int64_t>(y.size());
  const bool guide = gd.scale != 1.0 && diffusion::flow_guided(t, gd.t_min, gd.t_max);
  const std::int64_t rows = guide ? 2 * n : n;
  std::vector<double> x2(x);
  std::vector<std::int32_t> y2(y);
  if (guide) {
    x2.insert(x2.end(), x.begin(), x.end());
    y2.insert(y2.end(), static_cast<std::size_t>(n), cfg.num_classes);
  }
  auto out = to_f64(run.run(to_f32(x2), std::vector<float>(static_cast<std::size_t>(rows), static_cast<float>(t)), y2,
                            nullptr, nullptr, 1));
  if (guide) {
    out = diffusion::cfg_combine({rows, cfg.out_channels(), cfg.input_size, cfg.input_size}, out, gd.scale,
                                 std::min<std::int64_t>(gd.channels, cfg.out_channels()));
    out.resize(out.size() / 2);
  }
  return out;
}

Guidance group_guidance(const GoldenFile& g, const std::string& grp) {
  Guidance gd;
  const auto& f = g.h5();
  if (f.has_attr(grp, "cfg_scale")) gd.scale = f.attr_double(grp, "cfg_scale");
  if (f.has_attr(grp, "scale")) gd.scale = f.attr_double(grp, "scale");
  if (f.has_attr(grp, "guided_channels")) gd.channels = f.attr_int(grp, "guided_channels");
  if (f.has_attr(grp, "cfg_interval_start")) gd.t_max = 1.0 - f.attr_double(grp, "cfg_interval_start");
  return gd;
}

void require_attr(const GoldenFile& g, const std::string& grp, const char* name, const std::string& want) {
  if (!g.h5().has_attr(grp, name)) return;
  const std::string v = g.h5().attr_string(grp, name);
  DIT_CHECK(v == want, g.path(), ": ", grp, " ", name, " = \"", v, "\": verify integrates only \"", want,
            "\" (the sampler's form)");
}

}  // namespace

diffusion::TrainObjective golden_objective(const GoldenFile& g) {
  using namespace diffusion;
  TrainObjective o;
  o.objective = attr_choice(g, "objective", kObjectiveNames, Objective::Ddpm);
  o.timesteps.sampling = attr_choice(g, "timestep_sampling", kTimestepSamplingNames, TimestepSampling::Uniform);
  o.timesteps.mean = attr_real(g, "logit_normal_mean", 0.0);
  o.timesteps.std = attr_real(g, "logit_normal_std", 1.0);
  o.cosine = g.h5().has_attr("/config", "cosine_loss") && g.h5().attr_int("/config", "cosine_loss") != 0
                 ? CosineTerm::Yes
                 : CosineTerm::No;
  o.weighting.weight = attr_choice(g, "loss_weight", kLossWeightNames, LossWeight::None);
  o.weighting.min_snr_gamma = attr_real(g, "min_snr_gamma", 5.0);
  DIT_CHECK(o.objective == Objective::Ddpm || attr_text(g, "path_type", "Linear") == "Linear", g.path(),
            ": /config path_type = \"", attr_text(g, "path_type", ""), "\": verify knows the Linear path only");
  DIT_CHECK(o.objective == Objective::Ddpm || attr_text(g, "prediction", "velocity") == "velocity", g.path(),
            ": /config prediction = \"", attr_text(g, "prediction", ""), "\": verify knows velocity prediction only");
  return o;
}

BackendLossResult backend_loss(Backend& be, const DiTConfig& cfg, const LossSetup& setup, const std::vector<float>& out,
                               const std::vector<double>& x_start, const std::vector<double>& noise,
                               std::int64_t first, std::int64_t count, std::int64_t n) {
  const std::int64_t per = x_start.size() / setup.row.size(), c = cfg.in_channels, hw = cfg.input_size;
  Arena arena(be);
  auto put = [&](const void* host, DType host_dt, Shape s, DType dt) {
    Tensor x = arena.tensor(s, dt);
    be.copy(x, Tensor{const_cast<void*>(host), host_dt, s, Device::Host});
    return x;
  };
  const std::vector<float> x0(x_start.begin() + first * per, x_start.begin() + (first + count) * per);
  const std::vector<float> eps(noise.begin() + first * per, noise.begin() + (first + count) * per);
  const std::vector<std::int32_t> ti(setup.row.begin() + first, setup.row.begin() + first + count);
  const std::int64_t rows = static_cast<std::int64_t>(setup.table.size()) / math::kNumLossCoefs;
  const Shape img{count, c, hw, hw}, out_shape{count, cfg.out_channels(), hw, hw};
  const Tensor tout = put(out.data(), DType::F32, out_shape, be.compute_dtype());
  const Tensor dout = arena.tensor(out_shape, be.compute_dtype()), terms = arena.tensor({count, 3}, DType::F32);
  const Tensor data = put(x0.data(), DType::F32, img, DType::F32);
  be.sample_loss(diffusion_loss_fn(setup.kind, data, static_cast<float>(double(count) / double(n))),
                 {.a = tout,
                  .grad = dout,
                  .x0 = data,
                  .noise = put(eps.data(), DType::F32, img, DType::F32),
                  .t = put(ti.data(), DType::I32, {count}, DType::I32),
                  .coefs = put(setup.table.data(), DType::F32, {rows, math::kNumLossCoefs}, DType::F32),
                  .terms = terms});
  return {host_copy(be, dout), host_copy(be, terms)};
}

void verify_min_snr_weights(const GoldenFile& g, const diffusion::Schedule& sched,
                            const diffusion::TrainObjective& recipe, const std::vector<float>& terms, Report& rep) {
  const auto t = g.h5().read_ints("/loss/t");
  const std::int64_t n = static_cast<std::int64_t>(t.size());
  std::vector<double> w, raw, weighted;
  for (std::int64_t i = 0; i < n; ++i) {
    w.push_back(diffusion::min_snr_weight(sched, t[i], recipe.weighting.min_snr_gamma));
    raw.push_back(terms[3 * i + 1]);  // the backend's mse is unweighted; its loss is w mse + vb
    weighted.push_back(w.back() * raw.back());
  }
  // The reference extracts sqrt(abar) and sqrt(1 - abar) as float32 (_extract_into_tensor's
  // .float()), so its weights carry float32 rounding: they are held to the fp32 rule.
  if (g.h5().exists("/loss/weight")) rep.full("loss/weight", w, g.read("/loss/weight", {n}), kTolF32);
  if (g.h5().exists("/loss/mse_raw")) rep.full("loss/mse_raw", raw, g.read("/loss/mse_raw", {n}));
  rep.full("loss/mse", weighted, g.read("/loss/mse", {n}));  // the reference's terms["mse"] is weighted
}

void verify_flow_loss(Backend& be, ParallelContext& ctx, const GoldenFile& g, const VerifyOptions& opt, Report& rep) {
  const DiTConfig& cfg = g.config();
  const diffusion::TrainObjective recipe = golden_objective(g);
  const std::int64_t n = g.h5().shape("/loss/x1")[0];
  const Shape in_shape = image_shape(cfg, n, cfg.in_channels);
  const auto x1 = g.read("/loss/x1", in_shape), noise = g.read("/loss/noise", in_shape);
  const auto t = g.read("/loss/t", {n});
  for (double v : t)
    DIT_CHECK(v >= 0.0 && v <= 1.0, g.path(), ": /loss/t = ", v, ": expected flow times in [0, 1]");
  const std::vector<float> x_t = backend_flow_xt(be, cfg, x1, noise, t);
  if (g.h5().exists("/loss/x_t")) rep.full("loss/x_t", x_t, g.read("/loss/x_t", in_shape));

  LossSetup setup{diffusion::loss_kind(recipe, false), diffusion::flow_coef_rows(t), {}};
  setup.row.resize(static_cast<std::size_t>(n));
  std::iota(setup.row.begin(), setup.row.end(), 0);
  Runner run(be, ctx, g, opt);
  auto dout = [&](std::int64_t f, std::int64_t count, const std::vector<float>& out) {
    return backend_loss(be, cfg, setup, out, x1, noise, f, count, n).dout;
  };
  const auto out = run.run(x_t, std::vector<float>(t.begin(), t.end()), g.read_labels("/loss/y", n), dout, nullptr,
                           opt.microbatches);
  if (g.h5().exists("/loss/pred")) rep.full("loss/pred", out, g.read("/loss/pred", in_shape));
  const std::vector<float> terms = backend_loss(be, cfg, setup, out, x1, noise, 0, n, n).terms;
  std::vector<float> loss, mse, cos;
  for (std::int64_t i = 0; i < n; ++i)
    loss.push_back(terms[3 * i]), mse.push_back(terms[3 * i + 1]), cos.push_back(terms[3 * i + 2]);
  rep.full("loss/loss", loss, g.read("/loss/loss", {n}));
  rep.full("loss/mse", mse, g.read("/loss/mse", {n}));
  if (recipe.cosine == diffusion::CosineTerm::Yes) rep.full("loss/cos", cos, g.read("/loss/cos", {n}));
  compare_params(rep, g, "loss/grads/", run.grads(), "/loss/grads/");
}

void verify_timesteps(const GoldenFile& g, Report& rep) {
  const auto& f = g.h5();
  const diffusion::TrainObjective recipe = golden_objective(g);
  const double mean = f.has_attr("/timesteps", "mean") ? f.attr_double("/timesteps", "mean") : recipe.timesteps.mean;
  const double std = f.has_attr("/timesteps", "std") ? f.attr_double("/timesteps", "std") : recipe.timesteps.std;
  DIT_CHECK(mean == recipe.timesteps.mean && std == recipe.timesteps.std, g.path(),
            ": /timesteps mean, std differ from /config logit_normal_mean, logit_normal_std");
  const double t0 = f.has_attr("/timesteps", "t0") ? f.attr_double("/timesteps", "t0") : 0.0;
  const double t1 = f.has_attr("/timesteps", "t1") ? f.attr_double("/timesteps", "t1") : 1.0;
  DIT_CHECK(t0 == 0.0 && t1 == 1.0, g.path(), ": /timesteps t0 = ", t0, ", t1 = ", t1,
            ": the linear path with velocity prediction trains on [0, 1]");
  const std::int64_t n = f.shape("/timesteps/u")[0];
  const auto u = g.read("/timesteps/u", {n});
  std::vector<double> t;
  for (double v : u) t.push_back(diffusion::logit_normal_t(v, mean, std));
  rep.full("timesteps/t", t, g.read("/timesteps/t", {n}), kTolF64);
}

void verify_flow_sample(Backend& be, ParallelContext& ctx, const GoldenFile& g, const VerifyOptions& opt, Report& rep) {
  const DiTConfig& cfg = g.config();
  Runner run(be, ctx, g, opt);
  for (const std::string name : {"euler", "heun", "euler_maruyama", "euler_maruyama_last"}) {
    const std::string grp = "/sample/" + name;
    if (!g.h5().exists(grp)) continue;
    const std::int64_t n = g.h5().shape(grp + "/x_t")[0];
    const Shape shape = image_shape(cfg, n, cfg.in_channels);
    const auto x = g.read(grp + "/x_t", shape);
    const auto y = g.read_labels(grp + "/y", n);
    const double t = read_scalar(g, grp + "/t"), t_next = read_scalar(g, grp + "/t_next"), dt = t_next - t;
    const Guidance gd = group_guidance(g, grp);
    const std::vector<double> v = guided_velocity(run, cfg, gd, x, t, y);
    // The guided velocities a step evaluated, where the file holds them (they isolate the model
    // from the integrator: `out` is dominated by x_t).
    auto compare = [&](const char* what, const std::vector<double>& ours) {
      if (g.h5().exists(grp + "/" + what)) rep.full(grp.substr(1) + "/" + what, ours, g.read(grp + "/" + what, shape));
    };
    std::vector<double> out;
    if (name == "euler") {
      require_attr(g, grp, "method", "euler");
      compare("v", v);
      out = diffusion::euler_step(x, v, dt);
    } else if (name == "heun") {
      require_attr(g, grp, "method", "heun2");
      const std::vector<double> xp = diffusion::heun_predict(x, v, dt);
      const std::vector<double> k2 = guided_velocity(run, cfg, gd, xp, t_next, y);
      compare("k1", v);
      compare("k2", k2);
      out = diffusion::heun_correct(x, v, k2, dt);
    } else {
      compare("drift", diffusion::flow_sde_drift(x, v, t));
      require_attr(g, grp, "diffusion_form", "sigma");
      require_attr(g, grp, "last_step", "Mean");
      DIT_CHECK(!g.h5().has_attr(grp, "diffusion_norm") || g.h5().attr_double(grp, "diffusion_norm") == 1.0,
                g.path(), ": ", grp, " diffusion_norm: verify integrates norm 1 only");
      out = name == "euler_maruyama"
                ? diffusion::euler_maruyama_step(x, v, t, dt, g.read(grp + "/noise", shape))
                : diffusion::sde_mean_last_step(x, v, t, g.h5().attr_double(grp, "last_step_size"));
    }
    rep.full(grp.substr(1) + "/out", out, g.read(grp + "/out", shape));
  }
  if (!g.h5().exists("/sample/cfg")) return;
  // The guided forward of a doubled batch, as the reference's forward_with_cfg.
  const std::int64_t n2 = g.h5().shape("/sample/cfg/x")[0];
  DIT_CHECK(n2 % 2 == 0, g.path(), ": /sample/cfg/x must hold a doubled (even) batch, got ", n2);
  const Guidance gd = group_guidance(g, "/sample/cfg");
  const auto t2 = g.read("/sample/cfg/t", {n2});
  const auto x2 = g.read("/sample/cfg/x", image_shape(cfg, n2, cfg.in_channels));
  const auto y2 = g.read_labels("/sample/cfg/y", n2);
  // forward_with_cfg runs the first half twice (x[:N], x[:N]) with the labels y.
  std::vector<double> xx(x2.begin(), x2.begin() + x2.size() / 2);
  xx.insert(xx.end(), xx.begin(), xx.end());
  const auto all = to_f64(run.run(to_f32(xx), std::vector<float>(t2.begin(), t2.end()), y2, nullptr, nullptr, 1));
  const diffusion::ImageShape out_shape{n2, cfg.out_channels(), cfg.input_size, cfg.input_size};
  const std::int64_t guided = std::min<std::int64_t>(gd.channels, cfg.out_channels());
  std::vector<double> both = all;
  if (gd.scale != 1.0 && diffusion::flow_guided(t2[0], gd.t_min, gd.t_max)) {
    both = diffusion::cfg_combine(out_shape, all, gd.scale, guided);
  } else {  // outside the interval: the conditional rows' guided channels in both halves
    const std::int64_t row = out_shape.per_sample(), hw = cfg.input_size * cfg.input_size;
    for (std::int64_t i = n2 / 2; i < n2; ++i)
      for (std::int64_t j = 0; j < guided * hw; ++j) both[i * row + j] = all[(i - n2 / 2) * row + j];
  }
  rep.full("sample/cfg/out", both, g.read("/sample/cfg/out", image_shape(cfg, n2, cfg.out_channels())));
}

}  // namespace dit::verify
