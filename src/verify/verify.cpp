// Golden verification: each group compares our outputs with the official float64 numbers using
// one rule, the relative L2 error per tensor ||a - b|| / ||b||, against 1e-4 for fp32 and 2e-2 for
// bf16/fp16 storage (1e-12 for the float64 schedule arrays).
#include "verify/verify.h"
#include "verify/verify_common.h"

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
#include "engine/prune.h"
#include "engine/sampler.h"
#include "backend/backend.h"
#include "diffusion/losses.h"
#include "diffusion/sampling.h"
#include "diffusion/noise_schedule.h"
#include "io/golden.h"
#include "optim/zero.h"
#include "parallel/backend_comms.h"

namespace dit {

namespace {

using namespace verify;

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
  const diffusion::TrainObjective recipe = golden_objective(g);
  LossSetup setup{diffusion::loss_kind(recipe, cfg.learn_sigma), diffusion::loss_coef_table(sched, recipe.weighting),
                  std::vector<std::int32_t>(t.begin(), t.end())};
  // Per microbatch: the loss gradient of its samples, scaled from its mean to the batch mean.
  auto dout = [&](std::int64_t f, std::int64_t count, const std::vector<float>& out) {
    return backend_loss(be, cfg, setup, out, x_start, noise, f, count, n).dout;
  };
  const auto out = run.run(to_f32(x_t), std::vector<float>(model_t.begin(), model_t.end()),
                           g.read_labels("/loss/y", n), dout, nullptr, opt.microbatches);
  const std::vector<float> terms = backend_loss(be, cfg, setup, out, x_start, noise, 0, n, n).terms;
  if (recipe.weighting.weight == diffusion::LossWeight::MinSnr) verify_min_snr_weights(g, sched, recipe, terms, rep);
  std::vector<float> loss, mse, vb;
  for (std::int64_t i = 0; i < n; ++i)
    loss.push_back(terms[3 * i]), mse.push_back(terms[3 * i + 1]), vb.push_back(terms[3 * i + 2]);
  rep.full("loss/loss", loss, g.read("/loss/loss", {n}));
  // With Min-SNR the reference's "mse" is the weighted term (verify_min_snr_weights).
  if (recipe.weighting.weight == diffusion::LossWeight::None) rep.full("loss/mse", mse, g.read("/loss/mse", {n}));
  if (cfg.learn_sigma) rep.full("loss/vb", vb, g.read("/loss/vb", {n}));
  compare_params(rep, g, "loss/grads/", run.grads(), "/loss/grads/");
}

// One ZeRO-sharded AdamW step from /weights with /loss/grads, then the EMA of /weights towards it.
void verify_adamw_ema(Backend& be, ParallelContext& ctx, const GoldenFile& g, const VerifyOptions& opt, bool adamw,
                      bool ema, Report& rep) {
  const DiTConfig& cfg = g.config();
  const auto chunks = partition_chunks(cfg, ctx.layout.pp, opt.virtual_stages);
  DiTStage model(be, cfg, chunks_of_stage(chunks, ctx.layout.pp, ctx.coord.pp, opt.stage.placement), *ctx.tp,
                 ctx.layout.dp);
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

// Whole DDPM and DDIM loops through the sampler the commands use (engine/sampler.h), guided as the
// official sample.py, from the reference's noise (/sample_loop/noise[key]: key 0 the start, key
// i + 1 the step at respaced timestep i): once with the clipping this model's data gets by default
// (a latent-shaped golden model: none, as the official DiT samples latents) against the
// clip_denoised=False loops, once with sample.clip_denoised = true against the clipped ones.
void verify_sample_loop(Backend& be, ParallelContext& ctx, const GoldenFile& g, const VerifyOptions& opt,
                        Report& rep) {
  const DiTConfig& cfg = g.config();
  const std::string respacing = g.h5().attr_string("/sample_loop", "respacing");
  int steps = 0;
  try {
    std::size_t used = 0;
    steps = std::stoi(respacing, &used);
    DIT_CHECK(used == respacing.size() && steps >= 1, "");
  } catch (const std::exception&) {
    DIT_FAIL(g.path(), ": /sample_loop respacing = \"", respacing, "\": expected a number of steps");
  }
  const std::int64_t n = g.h5().shape("/sample_loop/y")[0], per = image_shape(cfg, 1, cfg.in_channels).numel();
  const Shape out_shape = image_shape(cfg, n, cfg.in_channels);
  const std::vector<double> noise = g.read("/sample_loop/noise", {steps + 1, n, cfg.in_channels, cfg.input_size,
                                                                   cfg.input_size});
  const std::vector<std::int32_t> y = g.read_labels("/sample_loop/y", n);
  const std::int64_t guided = g.h5().attr_int("/sample_loop", "guided_channels");
  DIT_CHECK(guided == std::min(3, cfg.in_channels) || guided == cfg.in_channels, g.path(),
            ": /sample_loop guided_channels = ", guided, ": expected ", std::min(3, cfg.in_channels), " or ",
            cfg.in_channels);
  Runner run(be, ctx, g, opt);
  SampleSection s;
  s.num_steps = steps;
  s.cfg_scale = g.h5().attr_double("/sample_loop", "cfg_scale");
  s.cfg_official = guided != cfg.in_channels;
  const bool latents = samples_latents(cfg, false);
  DIT_CHECK(latents, g.path(), ": /sample_loop is for a latent-shaped model (channels other than 1 or 3), as the "
            "official DiT samples latents; this one has ", cfg.in_channels);
  for (const auto sampler : {diffusion::SamplerKind::Ddpm, diffusion::SamplerKind::Ddim}) {
    const std::string name = name_of(diffusion::kSamplerNames, sampler);
    s.sampler = sampler;
    for (const ClipSetting clip : {ClipSetting::Auto, ClipSetting::Yes}) {
      s.clip_denoised = clip;
      SampleRequest req = sample_request(s, std::vector<int>(y.begin(), y.end()), 1000, latents);
      req.given_noise = [&](std::uint64_t key, std::int64_t first, std::int64_t k) {
        const auto at = noise.begin() + static_cast<std::ptrdiff_t>((std::int64_t(key) * n + first) * per);
        return std::vector<double>(at, at + k * per);
      };
      const std::vector<float> got = sample_images(be, ctx, run.model(), req);
      const std::string want = "/sample_loop/" + name + (clip == ClipSetting::Auto ? "_out" : "_out_clipped");
      rep.full("sample_loop/" + name + (clip == ClipSetting::Auto ? " (clip_denoised auto)" : " (clip_denoised true)"),
               to_f64(got), g.read(want, out_shape));
    }
  }
}

// Depth pruning's block scores (engine/prune.h: each block's input/output cosine similarity) on
// /forward's inputs, with the whole model on world rank 0 alone (pruning runs on one rank).
void verify_prune(Backend& be, ParallelContext& ctx, const GoldenFile& g, Report& rep) {
  const DiTConfig& cfg = g.config();
  std::vector<double> bi;
  if (ctx.world_rank == 0) {
    SelfComm tp;
    DiTStage model(be, cfg, StageLayout::whole(cfg), tp);
    g.load_params(model.params(), "/weights");
    const std::int64_t n = g.h5().shape("/forward/x")[0], per = image_shape(cfg, 1, cfg.in_channels).numel();
    const auto x = g.read_f32("/forward/x", image_shape(cfg, n, cfg.in_channels));
    const auto t = g.read_f32("/forward/t", {n});
    const auto y = g.read_labels("/forward/y", n);
    bi = block_similarity(be, model, n, n, [&](std::int64_t f, std::int64_t k, StageInputs& in, Arena& arena) {
      upload_stage_inputs(be, cfg, k, {x.data() + f * per, t.data() + f, y.data() + f}, in, arena);
    });
  }
  const std::vector<double> want = g.read("/prune/bi_score", {cfg.depth});
  rep.full("prune/bi_score", bi, want);
  // The scores sit near 1, where the rule above sees little of them: 1 - cos as well.
  auto distance = [](std::vector<double> v) {
    for (double& c : v) c = 1 - c;
    return v;
  };
  rep.full("prune/bi_score (as 1 - cos)", bi.empty() ? bi : distance(bi), distance(want));
}

}  // namespace

const std::vector<std::string>& verify_group_names() {
  static const std::vector<std::string> names = {"forward", "schedule", "loss",  "timesteps",  "adamw",
                                                 "ema",     "sample",   "prune", "distill", "sample_loop"};
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
  std::string all;
  for (const auto& name : verify_group_names()) all += (all.empty() ? "" : ", ") + name;
  DIT_CHECK(!groups_to_run(opt, golden).empty(), "--golden ", opt.golden, " holds none of the groups ", all,
            ": nothing to compare (a golden file comes from tools/make_golden.py)");
  for (const auto& name : groups_to_run(opt, golden)) {
    DIT_CHECK(std::find(verify_group_names().begin(), verify_group_names().end(), name) != verify_group_names().end(),
              "unknown verify group '", name, "': expected some of ", all);
    DIT_CHECK(golden.has_group(name), golden.path(), ": group /", name, " is missing");
    DIT_CHECK(name != "prune" || golden.has_group("forward"), golden.path(),
              ": group /prune is scored on /forward's inputs, and /forward is missing");
    if (name == "distill") check_distill_group(golden);
  }
  DIT_CHECK(opt.microbatches >= 1, "--microbatches = ", opt.microbatches, ": expected at least 1");
  const DiTConfig& c = golden.config();
  // pp (x virtual stages) must fit the depth; the schedule's own checks say why, the flags are named here
  try {
    check_virtual_stages(opt.schedule, layout.pp, opt.microbatches, opt.virtual_stages);
    if (opt.schedule == ScheduleKind::ZbV) check_v_split(layout.pp, c.depth);
    check_stage_options(opt.stage, partition_chunks(c, layout.pp, opt.virtual_stages));
  } catch (const Error& e) {
    DIT_FAIL("--schedule ", schedule_name(opt.schedule), " --pp ", layout.pp, " --virtual-stages ",
             opt.virtual_stages, " --microbatches ", opt.microbatches, " on the golden model of depth ", c.depth,
             ": ", e.what());
  }
  DIT_CHECK(c.num_heads % layout.tp == 0 && c.ffn_hidden() % layout.tp == 0 && (6 * c.hidden_size) % layout.tp == 0,
            "--tp ", layout.tp, " does not divide the golden model's ", c.num_heads, " heads, ", c.ffn_hidden(),
            " MLP units and 6 x ", c.hidden_size, " adaLN outputs");
  DIT_CHECK(!opt.stage.sequence_parallel || (layout.tp > 1 && c.num_patches() % layout.tp == 0),
            "--sequence-parallel needs --tp > 1 dividing the golden model's ", c.num_patches(),
            " tokens (tp = ", layout.tp, ")");
  std::string why;
  DIT_CHECK(backend_available(backend_name(opt.backend, opt.precision), &why), "--backend ", opt.backend,
            " --precision ", opt.precision, ": ", why);
  const bool flow = golden_objective(golden).objective == diffusion::Objective::Flow;
  DIT_CHECK(!flow || !c.learn_sigma, golden.path(), ": /config learn_sigma = true with objective = \"flow\"");
  // Each group's batch is split over dp (and microbatches for the groups with a backward).
  for (const auto& name : groups_to_run(opt, golden)) {
    const bool backward = name == "forward" || name == "loss";
    const std::int64_t parts = std::int64_t(layout.dp) * (backward ? opt.microbatches : 1);
    std::vector<std::string> batches;
    if (name == "forward") batches = {"/forward/x"};
    if (name == "loss") batches = {flow ? "/loss/x1" : "/loss/x_start"};
    if (name == "sample" && !flow) batches = {"/sample/x_t", "/sample/cfg/x"};
    if (name == "sample" && flow)
      for (const char* s : {"/sample/euler/x_t", "/sample/heun/x_t", "/sample/euler_maruyama/x_t",
                            "/sample/euler_maruyama_last/x_t", "/sample/cfg/x"})
        if (golden.h5().exists(s)) batches.push_back(s);
    for (const auto& b : batches) {
      const std::int64_t n = golden.h5().shape(b)[0];
      DIT_CHECK(n % parts == 0, golden.path(), ": the ", n, " samples of ", b, " do not split over dp = ",
                layout.dp, (backward ? " x --microbatches " + std::to_string(opt.microbatches) : std::string()),
                "; choose a layout whose dp", (backward ? " x microbatches" : ""), " divides ", n);
    }
  }
}

int run_verify(const VerifyOptions& opt, const Layout& layout) {
  check_verify_inputs(opt, layout);
  GoldenFile golden(opt.golden);
  const std::vector<std::string> groups = groups_to_run(opt, golden);
  const DiTConfig& c = golden.config();
  RankSetup rank = make_rank({.backend = opt.backend, .precision = opt.precision, .layout = layout});
  const std::unique_ptr<Backend>& be = rank.backend;
  ParallelContext& ctx = rank.ctx;
  const std::string& comms = rank.comms;
  DIT_CHECK(comms != "nccl" || opt.virtual_stages == 1, "--virtual-stages ", opt.virtual_stages,
            " runs over MPI point-to-point only: set DIT_COMM=mpi or use 1");
  const DType dt = be->compute_dtype();
  Report rep(ctx, dt == DType::F32 ? kTolF32 : kTol16);
  auto wants = [&](const char* g) { return std::find(groups.begin(), groups.end(), g) != groups.end(); };
  if (wants("forward")) verify_forward(*be, ctx, golden, opt, rep);
  if (wants("schedule")) verify_schedule(golden, rep);
  const bool flow = golden_objective(golden).objective == diffusion::Objective::Flow;
  if (wants("loss")) (flow ? verify_flow_loss : verify_loss)(*be, ctx, golden, opt, rep);
  if (wants("timesteps")) verify_timesteps(golden, rep);
  if (wants("adamw") || wants("ema")) verify_adamw_ema(*be, ctx, golden, opt, wants("adamw"), wants("ema"), rep);
  if (wants("sample")) (flow ? verify_flow_sample : verify_sample)(*be, ctx, golden, opt, rep);
  if (wants("prune")) verify_prune(*be, ctx, golden, rep);
  if (wants("distill")) verify_distill(*be, ctx, golden, rep);
  if (wants("sample_loop")) verify_sample_loop(*be, ctx, golden, opt, rep);

  char header[512];
  std::snprintf(header, sizeof header,
                "golden %s: input %d patch %d channels %d hidden %d depth %d heads %d classes %d "
                "learn_sigma %s, objective %s; backend %s, %s; %s (%s), %d microbatch(es)",
                golden.path().c_str(), c.input_size, c.patch_size, c.in_channels, c.hidden_size, c.depth,
                c.num_heads, c.num_classes, c.learn_sigma ? "true" : "false",
                name_of(diffusion::kObjectiveNames, golden_objective(golden).objective), be->name().c_str(),
                std::string(dtype_name(dt)).c_str(), ctx.layout.str().c_str(), comms.c_str(), opt.microbatches);
  return rep.finish(header) == 0 ? 0 : 1;
}

int run_verify(const VerifyOptions& opt) { return run_verify(opt, Layout{}); }

}  // namespace dit
