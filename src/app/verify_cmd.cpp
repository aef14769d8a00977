// Golden verification: each group compares our outputs with the official float64 numbers using
// one rule, the relative L2 error per tensor ||a - b|| / ||b||, against 1e-4 for fp32 and 2e-2 for
// bf16/fp16 storage (1e-12 for the float64 schedule arrays).
#include "app/verify_cmd.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <sstream>

#include "engine/rank_backend.h"
#include "parallel/world.h"
#include "engine/dit_pipeline.h"
#include "engine/global_tensors.h"
#include "backend/backend.h"
#include "diffusion/losses.h"
#include "diffusion/sampling.h"
#include "diffusion/noise_schedule.h"
#include "io/golden.h"
#include "optim/zero.h"
#include "parallel/backend_comms.h"

namespace dit {

namespace {

constexpr double kTolF32 = 1e-4;   // float32 computation against float64 references
constexpr double kTol16 = 2e-2;    // bf16/fp16 storage (fp32 arithmetic) against float64 references
constexpr double kTolF64 = 1e-12;  // float64 schedule arrays
constexpr double kTolCompute = -1; // the tolerance of the backend's precision (Report's)

// One reported tensor. Every rank holds the same list; d2 and r2 are this rank's contribution
// to ||a - b||^2 and ||b||^2, summed over ranks before printing.
struct Row {
  std::string name;
  double tol;
  double d2 = 0, r2 = 0;
  double err() const { return r2 > 0 ? std::sqrt(d2 / r2) : std::sqrt(d2); }
  bool pass() const { return std::isfinite(err()) && err() <= tol; }
};

class Report {
 public:
  // compute_tol: the tolerance of tensors the backend computed (kTolF32 or kTol16).
  Report(ParallelContext& ctx, double compute_tol) : ctx_(ctx), compute_tol_(compute_tol) {}
  // Adds a comparison computed on the full tensors; counted on world rank 0 only.
  template <typename T>
  void full(const std::string& name, const std::vector<T>& ours, const std::vector<double>& want,
            double tol = kTolCompute) {
    Row r{name, tol == kTolCompute ? compute_tol_ : tol};
    if (ctx_.world_rank == 0) {
      DIT_CHECK(ours.size() == want.size(), name, ": comparison of ", ours.size(), " values with ", want.size());
      for (std::size_t i = 0; i < ours.size(); ++i) {
        const double d = static_cast<double>(ours[i]) - want[i];
        r.d2 += d * d;
        r.r2 += want[i] * want[i];
      }
    }
    rows_.push_back(r);
  }
  // Sums every rank's contributions and prints; returns the number of failed rows.
  int finish(const std::string& header);

 private:
  ParallelContext& ctx_;
  double compute_tol_;
  std::vector<Row> rows_;
};

int Report::finish(const std::string& header) {
  std::vector<double> sums;
  for (const Row& r : rows_) {
    sums.push_back(r.d2);
    sums.push_back(r.r2);
  }
  ctx_.world->all_reduce_sum(sums.data(), static_cast<int>(sums.size()));
  int failed = 0;
  double worst = 0;
  if (ctx_.world_rank == 0) std::printf("%s\n%-56s %12s %10s  %s\n", header.c_str(), "tensor", "rel_l2", "tol", "result");
  for (std::size_t i = 0; i < rows_.size(); ++i) {
    Row& r = rows_[i];
    r.d2 = sums[2 * i];
    r.r2 = sums[2 * i + 1];
    failed += !r.pass();
    worst = std::max(worst, r.err());
    if (ctx_.world_rank == 0)
      std::printf("%-56s %12.3e %10.1e  %s\n", r.name.c_str(), r.err(), r.tol, r.pass() ? "PASS" : "FAIL");
  }
  if (ctx_.world_rank == 0)
    std::printf("%zu passed, %d failed (worst relative error %.3e)\n", rows_.size() - failed, failed, worst);
  return failed;
}

std::vector<float> to_f32(const std::vector<double>& v) { return {v.begin(), v.end()}; }
std::vector<double> to_f64(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// Returns dL/d output for samples [first, first + count) given their outputs; empty = no backward.
using DoutFn = std::function<std::vector<float>(std::int64_t first, std::int64_t count,
                                                const std::vector<float>& out)>;

// This rank's slice of the model, loaded with the golden weights, run through the pipeline.
// A batch of N samples is split over dp ranks and then microbatches.
class Runner {
 public:
  Runner(Backend& be, ParallelContext& ctx, const GoldenFile& g, const VerifyOptions& opt)
      : be_(be), ctx_(ctx), cfg_(g.config()), opt_(opt) {
    const auto chunks = partition_chunks(cfg_, ctx.layout.pp, opt.virtual_stages);
    model_ = std::make_unique<DiTStage>(be, cfg_, chunks_of_stage(chunks, ctx.layout.pp, ctx.coord.pp), *ctx.tp,
                                        ctx.layout.dp, opt.stage);
    g.load_params(model_->params(), "/weights");
    executor_ = std::make_unique<PipelineExecutor>(*ctx.pp, be);
  }
  DiTStage& model() { return *model_; }

  // Runs x (N, C, H, W), model timesteps t, labels y; returns the full model output on every
  // rank. With dout, also backward (parameter grads summed over dp; dx returned via *dx).
  std::vector<float> run(const std::vector<float>& x, const std::vector<float>& t,
                         const std::vector<std::int32_t>& y, const DoutFn& dout,
                         std::vector<float>* dx = nullptr, int microbatches = 1) {
    const std::int64_t n = static_cast<std::int64_t>(t.size()), dp = ctx_.layout.dp;
    DIT_CHECK(n % (dp * microbatches) == 0, "a golden batch of ", n, " samples does not split over dp = ",
              dp, " x ", microbatches, " microbatches; use a layout and --microbatches whose product divides ", n);
    const std::int64_t nmb = n / (dp * microbatches);
    const std::int64_t per_in = x.size() / n, c = cfg_.in_channels, hw = cfg_.input_size;
    const std::int64_t per_out = std::int64_t(cfg_.out_channels()) * hw * hw;
    std::vector<float> out(static_cast<std::size_t>(n * per_out), 0.f);
    if (dx) dx->assign(x.size(), 0.f);
    auto first = [&](int mb) { return (ctx_.coord.dp * microbatches + mb) * nmb; };
    const DType dt = be_.compute_dtype();
    DiTPipelineHooks hooks;
    hooks.make_inputs = [&](int mb, StageInputs& in, Arena& arena) {
      const std::int64_t f = first(mb);
      upload_stage_inputs(be_, cfg_, nmb, {x.data() + f * per_in, t.data() + f, y.data() + f}, in, arena);
    };
    hooks.on_output = [&](int mb, const Tensor& o, Arena& arena) -> Tensor {
      std::vector<float> slice = host_copy(be_, o);
      if (ctx_.coord.tp == 0) std::copy(slice.begin(), slice.end(), out.begin() + first(mb) * per_out);
      if (!dout) return {};
      std::vector<float> d = dout(first(mb), nmb, slice);
      Tensor dt_out = arena.tensor(o.shape, dt);
      be_.copy(dt_out, Tensor{d.data(), DType::F32, o.shape, Device::Host});
      return dt_out;
    };
    if (dx)
      hooks.on_input_grad = [&](int mb, const Tensor& g) {
        if (ctx_.coord.tp != 0) return;
        std::vector<float> v = host_copy(be_, g);
        std::copy(v.begin(), v.end(), dx->begin() + first(mb) * per_in);
      };
    model_->params().zero_grads();
    DiTPipelineStage stage(be_, *model_, nmb, hooks);
    const int pp = ctx_.layout.pp, v = opt_.virtual_stages;
    executor_->run(dout ? make_schedule(opt_.schedule, pp, ctx_.coord.pp, microbatches, v)
                        : make_forward_only(microbatches, pp, v),
                   microbatches, stage);
    // Each sample's output lives on one last-stage rank (tp 0 of its dp replica): sum to all.
    ctx_.world->all_reduce_sum(Tensor{out.data(), DType::F32, {std::int64_t(out.size())}, Device::Host});
    if (dx) ctx_.world->all_reduce_sum(Tensor{dx->data(), DType::F32, {std::int64_t(dx->size())}, Device::Host});
    if (dout) ctx_.dp->all_reduce_sum(model_->params().flat_grads());
    return out;
  }

  std::map<std::string, std::vector<float>> grads() {
    return gather_global(*model_, ctx_, host_copy(be_, model_->params().flat_grads()));
  }

 private:
  Backend& be_;
  ParallelContext& ctx_;
  DiTConfig cfg_;
  VerifyOptions opt_;
  std::unique_ptr<DiTStage> model_;
  std::unique_ptr<PipelineExecutor> executor_;
};

Shape image_shape(const DiTConfig& c, std::int64_t n, int channels) {
  return {n, channels, c.input_size, c.input_size};
}

void compare_params(Report& rep, const GoldenFile& g, const std::string& prefix,
                    const std::map<std::string, std::vector<float>>& ours, const std::string& group) {
  const DiTConfig& cfg = g.config();
  for (const ParamSpec& s : DiTStage::declare(cfg, StageLayout::whole(cfg)))
    rep.full(prefix + s.name, ours.at(s.name), g.read(group + s.name, s.global));
}

// The forward group: model output, input gradient and every parameter gradient of sum(out * R).
void verify_forward(Backend& be, ParallelContext& ctx, const GoldenFile& g, const VerifyOptions& opt, Report& rep) {
  const DiTConfig& cfg = g.config();
  Runner run(be, ctx, g, opt);
  // Every tensor the file calls trainable must be one of ours, and the reverse.
  const auto trainable = g.h5().attr_strings("/", "trainable");
  const auto specs = DiTStage::declare(cfg, StageLayout::whole(cfg));
  DIT_CHECK(trainable.size() == specs.size(), g.path(), ": lists ", trainable.size(),
            " trainable tensors, the model built from its config has ", specs.size());
  for (const auto& name : trainable)
    DIT_CHECK(std::any_of(specs.begin(), specs.end(), [&](const ParamSpec& s) { return s.name == name; }),
              g.path(), ": trainable tensor '", name, "' is not in the model");

  if (const Embedders* e = run.model().embedders())
    rep.full("forward/pos_embed", ctx.world_rank == 0 ? host_copy(be, e->pos_embed()) : std::vector<float>{},
             g.read("/weights/pos_embed", {1, cfg.num_patches(), cfg.hidden_size}));
  else
    rep.full("forward/pos_embed", std::vector<float>{}, {});

  const std::int64_t n = g.h5().shape("/forward/x")[0];
  const Shape in_shape = image_shape(cfg, n, cfg.in_channels), out_shape = image_shape(cfg, n, cfg.out_channels());
  const auto cot = g.read_f32("/forward/cotangent", out_shape);
  const std::int64_t per_out = out_shape.numel() / n;
  std::vector<float> dx;
  const auto out = run.run(g.read_f32("/forward/x", in_shape), g.read_f32("/forward/t", {n}),
                           g.read_labels("/forward/y", n),
                           [&](std::int64_t f, std::int64_t count, const std::vector<float>&) {
                             return std::vector<float>(cot.begin() + f * per_out, cot.begin() + (f + count) * per_out);
                           },
                           &dx, opt.microbatches);
  rep.full("forward/out", out, g.read("/forward/out", out_shape));
  rep.full("forward/dx", dx, g.read("/forward/dx", in_shape));
  compare_params(rep, g, "forward/grads/", run.grads(), "/forward/grads/");
}

// The float64 schedule arrays of the linear schedule over 1000 steps.
void verify_schedule(const GoldenFile& g, Report& rep) {
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
    rep.full(path.substr(1), *ours, g.read(path, {s.num_timesteps}), kTolF64);
  }
}

// The training loss as training computes it, on the backend (Backend::diffusion_loss), for
// samples [first, first + count) of a batch of n: their per-sample terms (loss, mse, vb) and
// d mean_n(loss) / d out.
struct BackendLossResult {
  std::vector<float> dout, terms;
};
BackendLossResult backend_loss(Backend& be, const diffusion::Schedule& sched, const DiTConfig& cfg,
                               const std::vector<float>& out, const std::vector<double>& x_start,
                               const std::vector<double>& noise, const std::vector<std::int64_t>& t,
                               std::int64_t first, std::int64_t count, std::int64_t n) {
  const std::int64_t per = x_start.size() / t.size(), c = cfg.in_channels, hw = cfg.input_size;
  Arena arena(be);
  auto put = [&](const void* host, DType host_dt, Shape s, DType dt) {
    Tensor x = arena.tensor(s, dt);
    be.copy(x, Tensor{const_cast<void*>(host), host_dt, s, Device::Host});
    return x;
  };
  const std::vector<float> x0(x_start.begin() + first * per, x_start.begin() + (first + count) * per);
  const std::vector<float> eps(noise.begin() + first * per, noise.begin() + (first + count) * per);
  const std::vector<std::int32_t> ti(t.begin() + first, t.begin() + first + count);
  const std::vector<float> table = diffusion::loss_coef_table(sched);
  const Shape img{count, c, hw, hw}, out_shape{count, cfg.out_channels(), hw, hw};
  const Tensor tout = put(out.data(), DType::F32, out_shape, be.compute_dtype());
  const Tensor dout = arena.tensor(out_shape, be.compute_dtype()), terms = arena.tensor({count, 3}, DType::F32);
  be.diffusion_loss(tout, put(x0.data(), DType::F32, img, DType::F32), put(eps.data(), DType::F32, img, DType::F32),
                    put(ti.data(), DType::I32, {count}, DType::I32),
                    put(table.data(), DType::F32, {sched.num_timesteps, math::kNumLossCoefs}, DType::F32),
                    cfg.learn_sigma, static_cast<float>(double(count) / double(n)), dout, terms);
  return {host_copy(be, dout), host_copy(be, terms)};
}

// Training loss terms and the parameter gradients of mean(loss), with the loss on the backend.
void verify_loss(Backend& be, ParallelContext& ctx, const GoldenFile& g, const VerifyOptions& opt, Report& rep) {
  const DiTConfig& cfg = g.config();
  const auto sched = diffusion::create_diffusion({"", cfg.learn_sigma, 1000});
  const std::int64_t n = g.h5().shape("/loss/x_start")[0];
  const Shape in_shape = image_shape(cfg, n, cfg.in_channels);
  const auto x_start = g.read("/loss/x_start", in_shape);
  const auto noise = g.read("/loss/noise", in_shape);
  const auto t = g.h5().read_ints("/loss/t");
  DIT_CHECK(static_cast<std::int64_t>(t.size()) == n, g.path(), ": /loss/t must have ", n, " entries");
  for (auto v : t) sched.check_timestep(v, "/loss/t");

  Runner run(be, ctx, g, opt);
  const auto x_t = diffusion::q_sample(sched, x_start, t, noise);
  const auto model_t = sched.model_timesteps(t);
  // Per microbatch: the loss gradient of its samples, scaled from its mean to the batch mean.
  auto dout = [&](std::int64_t f, std::int64_t count, const std::vector<float>& out) {
    return backend_loss(be, sched, cfg, out, x_start, noise, t, f, count, n).dout;
  };
  const auto out = run.run(to_f32(x_t), std::vector<float>(model_t.begin(), model_t.end()),
                           g.read_labels("/loss/y", n), dout, nullptr, opt.microbatches);
  const std::vector<float> terms = backend_loss(be, sched, cfg, out, x_start, noise, t, 0, n, n).terms;
  std::vector<float> loss, mse, vb;
  for (std::int64_t i = 0; i < n; ++i)
    loss.push_back(terms[3 * i]), mse.push_back(terms[3 * i + 1]), vb.push_back(terms[3 * i + 2]);
  rep.full("loss/loss", loss, g.read("/loss/loss", {n}));
  rep.full("loss/mse", mse, g.read("/loss/mse", {n}));
  if (cfg.learn_sigma) rep.full("loss/vb", vb, g.read("/loss/vb", {n}));
  compare_params(rep, g, "loss/grads/", run.grads(), "/loss/grads/");
}

// One ZeRO-sharded AdamW step from /weights with /loss/grads, then the EMA of /weights towards it.
void verify_adamw_ema(Backend& be, ParallelContext& ctx, const GoldenFile& g, const VerifyOptions& opt, bool adamw,
                      bool ema, Report& rep) {
  const DiTConfig& cfg = g.config();
  const auto chunks = partition_chunks(cfg, ctx.layout.pp, opt.virtual_stages);
  DiTStage model(be, cfg, chunks_of_stage(chunks, ctx.layout.pp, ctx.coord.pp), *ctx.tp, ctx.layout.dp);
  ParamSet& ps = model.params();
  g.load_params(ps, "/weights");
  ZeroOptimizer zero(be, ps, ctx);  // the EMA starts at /weights
  for (std::size_t i = 0; i < ps.size(); ++i) {
    const ParamSpec& s = ps.specs()[i];
    auto grad = ps.local_host(static_cast<int>(i), g.read_f32("/loss/grads/" + s.name, s.global));
    be.copy(ps.grad(static_cast<int>(i)), Tensor{grad.data(), DType::F32, ps.grad(static_cast<int>(i)).shape, Device::Host});
  }
  AdamWConfig a;
  a.lr = g.h5().attr_double("/adamw", "lr");
  a.beta1 = g.h5().attr_double("/adamw", "beta1");
  a.beta2 = g.h5().attr_double("/adamw", "beta2");
  a.eps = g.h5().attr_double("/adamw", "eps");
  a.weight_decay = g.h5().attr_double("/adamw", "weight_decay");
  // Every dp rank holds the full grads, so the dp mean is the golden gradient itself.
  zero.step(a, a.lr, 1, 0.0, g.h5().attr_double("/ema", "decay"));
  if (adamw)
    compare_params(rep, g, "adamw/params_after/", gather_global(model, ctx, host_copy(be, ps.flat_values())),
                   "/adamw/params_after/");
  if (ema)
    compare_params(rep, g, "ema/after/", gather_global(model, ctx, gather_shards(be, zero, zero.shard().ema(), ctx)),
                   "/ema/after/");
}

// One DDPM and one DDIM step on the respaced schedule, and the guided forward.
void verify_sample(Backend& be, ParallelContext& ctx, const GoldenFile& g, const VerifyOptions& opt, Report& rep) {
  const DiTConfig& cfg = g.config();
  const std::string respacing = g.h5().attr_string("/sample", "respacing");
  const auto sched = diffusion::create_diffusion({respacing, cfg.learn_sigma, 1000});
  const std::int64_t steps = sched.num_timesteps;
  rep.full("sample/timestep_map", std::vector<double>(sched.timestep_map.begin(), sched.timestep_map.end()),
           g.read("/sample/timestep_map", {steps}), kTolF64);
  rep.full("sample/betas", sched.betas, g.read("/sample/betas", {steps}), kTolF64);

  const std::int64_t n = g.h5().shape("/sample/x_t")[0];
  const Shape in_shape = image_shape(cfg, n, cfg.in_channels);
  const auto x_t = g.read("/sample/x_t", in_shape);
  const auto t = g.h5().read_ints("/sample/t");
  DIT_CHECK(static_cast<std::int64_t>(t.size()) == n, g.path(), ": /sample/t must have ", n, " entries");
  for (auto v : t) sched.check_timestep(v, "/sample/t");
  const auto model_t = sched.model_timesteps(t);
  Runner run(be, ctx, g, opt);
  // Sampling is forward only: the whole batch as one microbatch per dp replica when it splits.
  const auto out = to_f64(run.run(to_f32(x_t), std::vector<float>(model_t.begin(), model_t.end()),
                                  g.read_labels("/sample/y", n), nullptr, nullptr, 1));
  const diffusion::ImageShape shape{n, cfg.in_channels, cfg.input_size, cfg.input_size};
  const auto ddpm = diffusion::p_sample(sched, shape, out, x_t, t, g.read("/sample/ddpm_noise", in_shape),
                                        diffusion::ClipDenoised::kNo);
  rep.full("sample/ddpm_out", ddpm.sample, g.read("/sample/ddpm_out", in_shape));
  rep.full("sample/pred_xstart", ddpm.pred_xstart, g.read("/sample/pred_xstart", in_shape));
  const auto ddim = diffusion::ddim_sample(sched, shape, out, x_t, t, {}, 0.0, diffusion::ClipDenoised::kNo);
  rep.full("sample/ddim_out", ddim.sample, g.read("/sample/ddim_out", in_shape));

  // Classifier-free guidance: the official forward_with_cfg guides the first 3 channels.
  const std::int64_t n2 = g.h5().shape("/sample/cfg/x")[0];
  DIT_CHECK(n2 % 2 == 0, g.path(), ": /sample/cfg/x must hold a doubled (even) batch, got ", n2);
  const double scale = g.h5().attr_double("/sample/cfg", "scale");
  const std::int64_t guided = g.h5().has_attr("/sample/cfg", "guided_channels")
                                  ? g.h5().attr_int("/sample/cfg", "guided_channels")
                                  : std::min<std::int64_t>(3, cfg.in_channels);
  const auto cfg_out = to_f64(run.run(g.read_f32("/sample/cfg/x", image_shape(cfg, n2, cfg.in_channels)),
                                      g.read_f32("/sample/cfg/t", {n2}), g.read_labels("/sample/cfg/y", n2),
                                      nullptr, nullptr, 1));
  const diffusion::ImageShape out_shape{n2, cfg.out_channels(), cfg.input_size, cfg.input_size};
  rep.full("sample/cfg/out", diffusion::cfg_combine(out_shape, cfg_out, scale, guided),
           g.read("/sample/cfg/out", image_shape(cfg, n2, cfg.out_channels())));
}

}  // namespace

const std::vector<std::string>& verify_group_names() {
  static const std::vector<std::string> names = {"forward", "schedule", "loss", "adamw", "ema", "sample"};
  return names;
}

namespace {
std::vector<std::string> groups_to_run(const VerifyOptions& opt, const GoldenFile& golden) {
  std::vector<std::string> groups = opt.groups;
  if (groups.empty())
    for (const auto& name : verify_group_names())
      if (golden.has_group(name)) groups.push_back(name);
  return groups;
}
}  // namespace

void check_verify_inputs(const VerifyOptions& opt, const Layout& layout) {
  GoldenFile golden(opt.golden);
  for (const auto& name : groups_to_run(opt, golden)) {
    DIT_CHECK(std::find(verify_group_names().begin(), verify_group_names().end(), name) != verify_group_names().end(),
              "unknown verify group '", name, "': expected some of forward, schedule, loss, adamw, ema, sample");
    DIT_CHECK(golden.has_group(name), golden.path(), ": group /", name, " is missing");
  }
  DIT_CHECK(opt.microbatches >= 1, "--microbatches = ", opt.microbatches, ": expected at least 1");
  const DiTConfig& c = golden.config();
  // pp (x virtual stages) must fit the depth
  check_stage_options(opt.stage, partition_chunks(c, layout.pp, opt.virtual_stages));
  check_virtual_stages(opt.schedule, layout.pp, opt.microbatches, opt.virtual_stages);
  DIT_CHECK(c.num_heads % layout.tp == 0 && c.ffn_hidden() % layout.tp == 0 && (6 * c.hidden_size) % layout.tp == 0,
            "--tp ", layout.tp, " does not divide the golden model's ", c.num_heads, " heads, ", c.ffn_hidden(),
            " MLP units and 6 x ", c.hidden_size, " adaLN outputs");
  DIT_CHECK(!opt.stage.sequence_parallel || (layout.tp > 1 && c.num_patches() % layout.tp == 0),
            "--sequence-parallel needs --tp > 1 dividing the golden model's ", c.num_patches(),
            " tokens (tp = ", layout.tp, ")");
  std::string why;
  DIT_CHECK(backend_available(backend_name(opt.backend, opt.precision), &why), "--backend ", opt.backend,
            " --precision ", opt.precision, ": ", why);
  // Each group's batch is split over dp (and microbatches for the groups with a backward).
  for (const auto& name : groups_to_run(opt, golden)) {
    const bool backward = name == "forward" || name == "loss";
    const std::int64_t parts = std::int64_t(layout.dp) * (backward ? opt.microbatches : 1);
    std::vector<std::string> batches;
    if (name == "forward") batches = {"/forward/x"};
    if (name == "loss") batches = {"/loss/x_start"};
    if (name == "sample") batches = {"/sample/x_t", "/sample/cfg/x"};
    for (const auto& b : batches) {
      const std::int64_t n = golden.h5().shape(b)[0];
      DIT_CHECK(n % parts == 0, golden.path(), ": the ", n, " samples of ", b, " do not split over dp = ",
                layout.dp, (backward ? " x --microbatches " + std::to_string(opt.microbatches) : std::string()),
                "; choose a layout whose dp", (backward ? " x microbatches" : ""), " divides ", n);
    }
  }
}

int run_verify(const VerifyOptions& opt, ParallelContext& ctx) {
  check_verify_inputs(opt, ctx.layout);
  GoldenFile golden(opt.golden);
  const std::vector<std::string> groups = groups_to_run(opt, golden);
  const DiTConfig& c = golden.config();
  auto be = make_rank_backend(opt.backend, opt.precision);
  const std::string comms = attach_backend_comms(ctx, *be);
  DIT_CHECK(comms != "nccl" || opt.virtual_stages == 1, "--virtual-stages ", opt.virtual_stages,
            " runs over MPI point-to-point only: set DIT_COMM=mpi or use 1");
  const DType dt = be->compute_dtype();
  Report rep(ctx, dt == DType::F32 ? kTolF32 : kTol16);
  auto wants = [&](const char* g) { return std::find(groups.begin(), groups.end(), g) != groups.end(); };
  if (wants("forward")) verify_forward(*be, ctx, golden, opt, rep);
  if (wants("schedule")) verify_schedule(golden, rep);
  if (wants("loss")) verify_loss(*be, ctx, golden, opt, rep);
  if (wants("adamw") || wants("ema")) verify_adamw_ema(*be, ctx, golden, opt, wants("adamw"), wants("ema"), rep);
  if (wants("sample")) verify_sample(*be, ctx, golden, opt, rep);

  char header[512];
  std::snprintf(header, sizeof header,
                "golden %s: input %d patch %d channels %d hidden %d depth %d heads %d classes %d "
                "learn_sigma %s; backend %s, %s; %s (%s), %d microbatch(es)",
                golden.path().c_str(), c.input_size, c.patch_size, c.in_channels, c.hidden_size, c.depth,
                c.num_heads, c.num_classes, c.learn_sigma ? "true" : "false", be->name().c_str(),
                std::string(dtype_name(dt)).c_str(), ctx.layout.str().c_str(), comms.c_str(), opt.microbatches);
  return rep.finish(header) == 0 ? 0 : 1;
}

int run_verify(const VerifyOptions& opt) {
  ParallelContext ctx = make_single_context();
  return run_verify(opt, ctx);
}

std::function<int()> add_verify_command(CLI::App& app) {
  struct Flags {
    VerifyOptions opt;
    std::string groups, schedule = "1f1b", recompute = "none";
    int tp = 1, pp = 1;
  };
  auto f = std::make_shared<Flags>();
  VerifyOptions& v = f->opt;
  CLI::App* cmd = app.add_subcommand(
      "verify", "Check the model against a golden file of float64 numbers from the official DiT, at any layout");
  cmd->add_option("--golden", v.golden, "Golden HDF5 file")->required();
  cmd->add_option("--groups", f->groups, "Comma-separated: forward,schedule,loss,adamw,ema,sample (default: all)");
  cmd->add_option("--backend", v.backend, "Compute backend: cpu or cuda")->capture_default_str();
  cmd->add_option("--precision", v.precision, "fp32 (tolerance 1e-4) or bf16/fp16 storage (tolerance 2e-2)")
      ->capture_default_str();
  cmd->add_option("--tp", f->tp, "Tensor-parallel size")->capture_default_str();
  cmd->add_option("--pp", f->pp, "Pipeline stages")->capture_default_str();
  cmd->add_option("--microbatches", v.microbatches, "Microbatches per data-parallel rank")->capture_default_str();
  cmd->add_option("--schedule", f->schedule, "Pipeline schedule: 1f1b or gpipe")->capture_default_str();
  cmd->add_option("--virtual-stages", v.virtual_stages, "Model chunks per pipeline rank (> 1: interleaved 1F1B)")
      ->capture_default_str();
  cmd->add_option("--recompute", f->recompute, "Activation recomputation: none, selective or full")
      ->capture_default_str();
  cmd->add_option("--recompute-blocks", v.stage.recompute_blocks,
                  "Full recomputation for the first K blocks of each stage (0: all)")
      ->capture_default_str();
  cmd->add_flag("--sequence-parallel", v.stage.sequence_parallel,
                "Megatron sequence parallelism (tp > 1 dividing the tokens)");
  return [cmd, f] {
    if (!*cmd) return -1;
    VerifyOptions& opt = f->opt;
    std::stringstream ss(f->groups);
    for (std::string g; std::getline(ss, g, ',');)
      if (!g.empty()) opt.groups.push_back(g);
    Layout layout;
    collective_check([&] {
      opt.schedule = parse_schedule(f->schedule);
      opt.stage.recompute = parse_recompute(f->recompute);
      layout = layout_for_world(f->tp, f->pp);
      check_verify_inputs(opt, layout);
    });
    ParallelContext ctx = make_mpi_context(layout);
    return run_verify(opt, ctx);
  };
}

}  // namespace dit
