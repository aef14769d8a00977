// Golden verification: each group compares our outputs with the official float64 numbers using
// one rule, the relative L2 error per tensor ||a - b|| / ||b||, against 1e-4 for fp32.
#include "app/verify.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>

#include "backend/backend.h"
#include "io/golden.h"
#include "diffusion/losses.h"
#include "diffusion/sampling.h"
#include "diffusion/schedule.h"
#include "layers/dit_stage.h"
#include "optim/adamw.h"

namespace dit {

namespace {

constexpr double kTolF32 = 1e-4;  // float32 computation against float64 references
constexpr double kTolF64 = 1e-12; // float64 schedule arrays

struct Row {
  std::string name;
  double err;
  double tol;
  bool pass() const { return std::isfinite(err) && err <= tol; }
};

template <typename T>
double rel_l2_any(const std::vector<T>& a, const std::vector<double>& b) {
  DIT_CHECK(a.size() == b.size(), "comparison of ", a.size(), " values with ", b.size());
  double d2 = 0, r2 = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    d2 += d * d;
    r2 += b[i] * b[i];
  }
  return r2 > 0 ? std::sqrt(d2 / r2) : std::sqrt(d2);
}
double rel_l2(const std::vector<float>& a, const std::vector<double>& b) { return rel_l2_any(a, b); }
double rel_l2_f64(const std::vector<double>& a, const std::vector<double>& b) { return rel_l2_any(a, b); }

Tensor host_view(std::vector<float>& v, Shape s) { return Tensor{v.data(), DType::F32, s, Device::Host}; }

std::vector<double> to_f64(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// The whole model on one rank with the golden weights: forward and backward of one batch.
class Runner {
 public:
  Runner(Backend& be, const GoldenFile& g)
      : be_(be), cfg_(g.config()), model_(be, cfg_, StageLayout::whole(cfg_), self_),
        saved_(be), scratch_(be) {
    g.load_params(model_.params(), "/weights");
  }
  DiTStage& model() { return model_; }

  // Model output for images x (N, C, H, W), model timesteps t and labels y.
  std::vector<float> forward(std::vector<float> x, std::vector<float> t, std::vector<std::int32_t> y) {
    const std::int64_t n = static_cast<std::int64_t>(t.size());
    saved_.reset();
    scratch_.reset();
    in_shape_ = {n, cfg_.in_channels, cfg_.input_size, cfg_.input_size};
    StageInputs in;
    in.images = upload(host_view(x, in_shape_));
    in.t = upload(host_view(t, {n}), DType::F32);  // timesteps stay fp32
    in.ids = upload(Tensor{y.data(), DType::I32, {n}, Device::Host});
    acts_ = model_.forward(in, saved_, scratch_);
    return download(acts_.final.out);
  }

  // Backward of the last forward with cotangent dout; parameter grads are zeroed first.
  // Returns dL/dx.
  std::vector<float> backward(std::vector<float> dout) {
    model_.params().zero_grads();
    StageGrads grads;
    grads.dout = upload(host_view(dout, acts_.final.out.shape));
    grads.dx = saved_.tensor(acts_.x_out().shape, be_.compute_dtype());
    grads.dc = saved_.tensor(acts_.c.shape, be_.compute_dtype());
    grads.dimages = saved_.tensor(in_shape_, be_.compute_dtype());
    model_.backward(acts_, grads, scratch_);
    return download(grads.dimages);
  }

  std::vector<float> download(const Tensor& t) {
    std::vector<float> v(static_cast<std::size_t>(t.numel()));
    be_.copy(host_view(v, t.shape), t);
    return v;
  }

 private:
  Tensor upload(const Tensor& host) {
    return upload(host, host.dtype == DType::I32 ? DType::I32 : be_.compute_dtype());
  }
  Tensor upload(const Tensor& host, DType dtype) {
    Tensor t = saved_.tensor(host.shape, dtype);
    be_.copy(t, host);
    return t;
  }
  Backend& be_;
  DiTConfig cfg_;
  SelfComm self_;
  DiTStage model_;
  Arena saved_, scratch_;
  StageActs acts_;
  Shape in_shape_;
};

Shape image_shape(const DiTConfig& c, std::int64_t n, int channels) {
  return {n, channels, c.input_size, c.input_size};
}

// The forward group: model output, input gradient and every parameter gradient of sum(out * R).
void verify_forward(Backend& be, const GoldenFile& g, std::vector<Row>& rows) {
  const DiTConfig& cfg = g.config();
  Runner run(be, g);
  const ParamSet& ps = run.model().params();
  // Every tensor the file calls trainable must be one of ours, and the reverse.
  const auto trainable = g.h5().attr_strings("/", "trainable");
  DIT_CHECK(trainable.size() == ps.size(), g.path(), ": lists ", trainable.size(),
            " trainable tensors, the model built from its config has ", ps.size());
  for (const auto& name : trainable)
    DIT_CHECK(ps.index(name) >= 0, g.path(), ": trainable tensor '", name, "' is not in the model");

  const std::int64_t tokens = cfg.num_patches(), d = cfg.hidden_size;
  rows.push_back({"forward/pos_embed",
                  rel_l2(run.download(run.model().embedders()->pos_embed()),
                         g.read("/weights/pos_embed", {1, tokens, d})),
                  kTolF32});

  const std::int64_t n = g.h5().shape("/forward/x")[0];
  const Shape in_shape = image_shape(cfg, n, cfg.in_channels);
  const Shape out_shape = image_shape(cfg, n, cfg.out_channels());
  auto out = run.forward(g.read_f32("/forward/x", in_shape), g.read_f32("/forward/t", {n}),
                         g.read_labels("/forward/y", n));
  rows.push_back({"forward/out", rel_l2(out, g.read("/forward/out", out_shape)), kTolF32});
  auto dx = run.backward(g.read_f32("/forward/cotangent", out_shape));
  rows.push_back({"forward/dx", rel_l2(dx, g.read("/forward/dx", in_shape)), kTolF32});
  for (std::size_t i = 0; i < ps.size(); ++i) {
    const ParamSpec& s = ps.specs()[i];
    rows.push_back({"forward/grads/" + s.name,
                    rel_l2(ps.grad_host(static_cast<int>(i)),
                           g.read("/forward/grads/" + s.name, s.global)),
                    kTolF32});
  }
}

// The float64 schedule arrays of the linear schedule over 1000 steps.
void verify_schedule(const GoldenFile& g, std::vector<Row>& rows) {
  const auto s = diffusion::create_diffusion({"", g.config().learn_sigma, 1000});
  const std::pair<const char*, const std::vector<double>*> arrays[] = {
      {"betas", &s.betas},
      {"alphas_cumprod", &s.alphas_cumprod},
      {"alphas_cumprod_prev", &s.alphas_cumprod_prev},
      {"posterior_variance", &s.posterior_variance},
      {"posterior_log_variance_clipped", &s.posterior_log_variance_clipped},
      {"posterior_mean_coef1", &s.posterior_mean_coef1},
      {"posterior_mean_coef2", &s.posterior_mean_coef2}};
  for (const auto& [name, ours] : arrays) {
    const std::string path = std::string("/schedule/") + name;
    rows.push_back({path.substr(1), rel_l2_f64(*ours, g.read(path, {s.num_timesteps})), kTolF64});
  }
}

// Training loss terms and the parameter gradients of mean(loss).
void verify_loss(Backend& be, const GoldenFile& g, std::vector<Row>& rows) {
  const DiTConfig& cfg = g.config();
  const auto sched = diffusion::create_diffusion({"", cfg.learn_sigma, 1000});
  const std::int64_t n = g.h5().shape("/loss/x_start")[0];
  const Shape in_shape = image_shape(cfg, n, cfg.in_channels);
  const auto x_start = g.read("/loss/x_start", in_shape);
  const auto noise = g.read("/loss/noise", in_shape);
  const auto t = g.h5().read_ints("/loss/t");
  DIT_CHECK(static_cast<std::int64_t>(t.size()) == n, g.path(), ": /loss/t must have ", n, " entries");
  for (auto v : t) sched.check_timestep(v, "/loss/t");

  Runner run(be, g);
  const auto x_t = diffusion::q_sample(sched, x_start, t, noise);
  const auto model_t = sched.model_timesteps(t);
  const auto out = to_f64(run.forward(std::vector<float>(x_t.begin(), x_t.end()),
                                      std::vector<float>(model_t.begin(), model_t.end()),
                                      g.read_labels("/loss/y", n)));
  const diffusion::ImageShape shape{n, cfg.in_channels, cfg.input_size, cfg.input_size};
  const auto terms = diffusion::training_losses(sched, shape, {out, x_start, noise, t});
  rows.push_back({"loss/loss", rel_l2_f64(terms.loss, g.read("/loss/loss", {n})), kTolF32});
  rows.push_back({"loss/mse", rel_l2_f64(terms.mse, g.read("/loss/mse", {n})), kTolF32});
  if (cfg.learn_sigma)
    rows.push_back({"loss/vb", rel_l2_f64(terms.vb, g.read("/loss/vb", {n})), kTolF32});
  run.backward(std::vector<float>(terms.grad_model_output.begin(), terms.grad_model_output.end()));
  const ParamSet& ps = run.model().params();
  for (std::size_t i = 0; i < ps.size(); ++i) {
    const ParamSpec& s = ps.specs()[i];
    rows.push_back({"loss/grads/" + s.name,
                    rel_l2(ps.grad_host(static_cast<int>(i)), g.read("/loss/grads/" + s.name, s.global)),
                    kTolF32});
  }
}

// One AdamW step from /weights with /loss/grads, then the EMA of /weights towards the result.
void verify_adamw_ema(Backend& be, const GoldenFile& g, bool adamw, bool ema, std::vector<Row>& rows) {
  const DiTConfig& cfg = g.config();
  SelfComm self;
  DiTStage model(be, cfg, StageLayout::whole(cfg), self);
  ParamSet& ps = model.params();
  g.load_params(ps, "/weights");
  for (std::size_t i = 0; i < ps.size(); ++i) {
    const ParamSpec& s = ps.specs()[i];
    auto grad = ps.local_host(static_cast<int>(i), g.read_f32("/loss/grads/" + s.name, s.global));
    be.copy(ps.grad(static_cast<int>(i)), host_view(grad, ps.grad(static_cast<int>(i)).shape));
  }
  Optimizer opt(be, ps, 0, ps.numel());  // the EMA starts at /weights
  AdamWConfig a;
  a.lr = g.h5().attr_double("/adamw", "lr");
  a.beta1 = g.h5().attr_double("/adamw", "beta1");
  a.beta2 = g.h5().attr_double("/adamw", "beta2");
  a.eps = g.h5().attr_double("/adamw", "eps");
  a.weight_decay = g.h5().attr_double("/adamw", "weight_decay");
  opt.step(a, a.lr, 1, ps.flat_grads());
  if (adamw)
    for (std::size_t i = 0; i < ps.size(); ++i) {
      const ParamSpec& s = ps.specs()[i];
      rows.push_back({"adamw/params_after/" + s.name,
                      rel_l2(ps.value_host(static_cast<int>(i)),
                             g.read("/adamw/params_after/" + s.name, s.global)),
                      kTolF32});
    }
  if (!ema) return;
  opt.update_ema(g.h5().attr_double("/ema", "decay"));
  // The EMA range is the whole flat buffer: slice it per tensor.
  std::vector<float> all(static_cast<std::size_t>(ps.numel()));
  be.copy(host_view(all, {ps.numel()}), opt.ema());
  for (std::size_t i = 0; i < ps.size(); ++i) {
    const ParamSpec& s = ps.specs()[i];
    const auto begin = all.begin() + ps.offset(static_cast<int>(i));
    std::vector<float> mine(begin, begin + s.global.numel());
    rows.push_back({"ema/after/" + s.name, rel_l2(mine, g.read("/ema/after/" + s.name, s.global)),
                    kTolF32});
  }
}

// One DDPM and one DDIM step on the respaced schedule, and the guided forward.
void verify_sample(Backend& be, const GoldenFile& g, std::vector<Row>& rows) {
  const DiTConfig& cfg = g.config();
  const std::string respacing = g.h5().attr_string("/sample", "respacing");
  const auto sched = diffusion::create_diffusion({respacing, cfg.learn_sigma, 1000});
  const std::int64_t steps = sched.num_timesteps;
  std::vector<double> map(sched.timestep_map.begin(), sched.timestep_map.end());
  rows.push_back({"sample/timestep_map", rel_l2_f64(map, g.read("/sample/timestep_map", {steps})), kTolF64});
  rows.push_back({"sample/betas", rel_l2_f64(sched.betas, g.read("/sample/betas", {steps})), kTolF64});

  const std::int64_t n = g.h5().shape("/sample/x_t")[0];
  const Shape in_shape = image_shape(cfg, n, cfg.in_channels);
  const auto x_t = g.read("/sample/x_t", in_shape);
  const auto t = g.h5().read_ints("/sample/t");
  DIT_CHECK(static_cast<std::int64_t>(t.size()) == n, g.path(), ": /sample/t must have ", n, " entries");
  for (auto v : t) sched.check_timestep(v, "/sample/t");
  const auto model_t = sched.model_timesteps(t);
  Runner run(be, g);
  const auto out = to_f64(run.forward(std::vector<float>(x_t.begin(), x_t.end()),
                                      std::vector<float>(model_t.begin(), model_t.end()),
                                      g.read_labels("/sample/y", n)));
  const diffusion::ImageShape shape{n, cfg.in_channels, cfg.input_size, cfg.input_size};
  const auto ddpm = diffusion::p_sample(sched, shape, out, x_t, t, g.read("/sample/ddpm_noise", in_shape),
                                        diffusion::ClipDenoised::kNo);
  rows.push_back({"sample/ddpm_out", rel_l2_f64(ddpm.sample, g.read("/sample/ddpm_out", in_shape)), kTolF32});
  rows.push_back({"sample/pred_xstart", rel_l2_f64(ddpm.pred_xstart, g.read("/sample/pred_xstart", in_shape)),
                  kTolF32});
  const auto ddim = diffusion::ddim_sample(sched, shape, out, x_t, t, {}, 0.0, diffusion::ClipDenoised::kNo);
  rows.push_back({"sample/ddim_out", rel_l2_f64(ddim.sample, g.read("/sample/ddim_out", in_shape)), kTolF32});

  // Classifier-free guidance: the official forward_with_cfg guides the first 3 channels.
  const std::int64_t n2 = g.h5().shape("/sample/cfg/x")[0];
  DIT_CHECK(n2 % 2 == 0, g.path(), ": /sample/cfg/x must hold a doubled (even) batch, got ", n2);
  const double scale = g.h5().attr_double("/sample/cfg", "scale");
  const std::int64_t guided = g.h5().has_attr("/sample/cfg", "guided_channels")
                                  ? g.h5().attr_int("/sample/cfg", "guided_channels")
                                  : std::min<std::int64_t>(3, cfg.in_channels);
  const auto cfg_out = to_f64(run.forward(g.read_f32("/sample/cfg/x", image_shape(cfg, n2, cfg.in_channels)),
                                          g.read_f32("/sample/cfg/t", {n2}), g.read_labels("/sample/cfg/y", n2)));
  const diffusion::ImageShape out_shape{n2, cfg.out_channels(), cfg.input_size, cfg.input_size};
  rows.push_back({"sample/cfg/out",
                  rel_l2_f64(diffusion::cfg_combine(out_shape, cfg_out, scale, guided),
                             g.read("/sample/cfg/out", image_shape(cfg, n2, cfg.out_channels()))),
                  kTolF32});
}

}  // namespace

const std::vector<std::string>& verify_group_names() {
  static const std::vector<std::string> names = {"forward", "schedule", "loss", "adamw", "ema",
                                                 "sample"};
  return names;
}

int run_verify(const VerifyOptions& opt) {
  GoldenFile golden(opt.golden);
  std::vector<std::string> groups = opt.groups;
  if (groups.empty())
    for (const auto& name : verify_group_names())
      if (golden.has_group(name)) groups.push_back(name);
  for (const auto& name : groups) {
    bool known = false;
    for (const auto& k : verify_group_names()) known |= k == name;
    DIT_CHECK(known, "unknown verify group '", name, "'");
    DIT_CHECK(golden.has_group(name), golden.path(), ": group /", name, " is missing");
  }
  auto be = make_backend(opt.backend);
  std::vector<Row> rows;
  auto wants = [&](const char* g) { return std::find(groups.begin(), groups.end(), g) != groups.end(); };
  if (wants("forward")) verify_forward(*be, golden, rows);
  if (wants("schedule")) verify_schedule(golden, rows);
  if (wants("loss")) verify_loss(*be, golden, rows);
  if (wants("adamw") || wants("ema")) verify_adamw_ema(*be, golden, wants("adamw"), wants("ema"), rows);
  if (wants("sample")) verify_sample(*be, golden, rows);

  const DiTConfig& c = golden.config();
  std::printf("golden %s: input %d patch %d channels %d hidden %d depth %d heads %d classes %d "
              "learn_sigma %s; backend %s\n",
              golden.path().c_str(), c.input_size, c.patch_size, c.in_channels, c.hidden_size,
              c.depth, c.num_heads, c.num_classes, c.learn_sigma ? "true" : "false",
              be->name().c_str());
  std::printf("%-56s %12s %10s  %s\n", "tensor", "rel_l2", "tol", "result");
  int failed = 0;
  double worst = 0;
  for (const Row& r : rows) {
    std::printf("%-56s %12.3e %10.1e  %s\n", r.name.c_str(), r.err, r.tol, r.pass() ? "PASS" : "FAIL");
    failed += !r.pass();
    worst = std::max(worst, r.err);
  }
  std::printf("%zu passed, %d failed (worst relative error %.3e)\n", rows.size() - failed, failed, worst);
  return failed == 0 ? 0 : 1;
}

}  // namespace dit
