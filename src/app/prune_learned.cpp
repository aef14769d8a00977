// `dit_mp prune --method learned` (see prune_learned.h).
#include "app/prune_learned.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "app/prune_cmd.h"
#include "core/clock.h"
#include "core/resources.h"
#include "engine/prune.h"
#include "engine/rank_backend.h"
#include "engine/trainer.h"
#include "io/h5_dataset.h"
#include "parallel/backend_comms.h"
#include "parallel/world.h"
#include "run/resume.h"

namespace dit {

namespace fs = std::filesystem;

namespace {

constexpr std::int64_t kMaxSteps = 100000000;
constexpr int kMaxLoraRank = 4096;
constexpr double kTauRange[2] = {1e-3, 1e3}, kScalingRange[2] = {1e-3, 1e4};

// A --set of a key the learning run sets itself, or does not use, is refused rather than ignored
// or let past the flag's own range.
void check_learning_set(const std::string& assignment) {
  std::string key = assignment.substr(0, assignment.find('='));
  key.erase(std::remove(key.begin(), key.end(), ' '), key.end());
  const char* flag = key == "train.steps" ? "--steps (1 to 100000000)"
                     : key == "train.lr"  ? "--lr (the weights'; --gate-lr the logits')"
                                          : nullptr;
  DIT_CHECK(flag == nullptr, "--set ", assignment, ": learned pruning sets ", key, " from ", flag, "; give that flag");
  DIT_CHECK(key.rfind("distill.", 0) != 0 && key.rfind("run.", 0) != 0, "--set ", assignment,
            ": learned pruning trains without a teacher or a run folder, so [distill] and [run] keys do not apply");
}

// The learning run's configuration: the teacher's model and objective on the run's recipe and
// data (the demo's without --run), at a constant learning rate, then --tp/--pp and --set.
RunConfig learning_config(const PruneOptions& opt, const DiTConfig& model, diffusion::Objective objective,
                          int diffusion_steps) {
  RunConfig cfg = RunConfig::demo();
  const fs::path config = fs::path(opt.run_dir) / "config.toml";
  if (!opt.run_dir.empty() && fs::is_regular_file(config)) cfg = RunConfig::from_file(config.string());
  if (cfg.diffusion.objective != objective) cfg.diffusion = DiffusionSection{};
  cfg.diffusion.objective = objective;
  cfg.diffusion.steps = diffusion_steps;
  cfg.model.preset.clear();
  cfg.model.dit = model;
  cfg.distill = DistillSection{};
  cfg.run = RunSection{};
  cfg.parallel.layout = LayoutMode::Fixed;
  cfg.parallel.pp_layers.clear();
  cfg.parallel.tp = opt.tp;
  cfg.parallel.pp = opt.pp;
  cfg.train.steps = opt.steps;
  cfg.train.lr = opt.lr > 0 ? opt.lr : 1e-4;  // a run's lr is positive; --lr 0 is set on the Trainer's below
  cfg.train.warmup = 0;
  cfg.train.lr_schedule = LrSchedule::Constant;
  cfg.train.eval_every = 0;
  if (!opt.data.empty()) cfg.data.path = opt.data;
  for (const std::string& s : opt.sets) {
    check_learning_set(s);
    cfg.set(s, "--set " + s);
  }
  cfg.validate();
  return cfg;
}

// The values spaced, each printed by `format` (a printf conversion of one double).
std::string spaced(const std::vector<double>& values, const char* format) {
  std::string s;
  char buf[32];
  for (double v : values) {
    std::snprintf(buf, sizeof buf, format, v);
    s += (s.empty() ? "" : " ") + std::string(buf);
  }
  return s;
}

// "4,0.1": a flag's values as given.
std::string listed(const std::vector<double>& values) {
  std::string s = spaced(values, "%g");
  std::replace(s.begin(), s.end(), ' ', ',');
  return s;
}

GateSettings gate_settings(const PruneOptions& opt, const DiTConfig& model, int depth) {
  GateSettings g;
  if (opt.groups.empty()) {
    g.groups = default_gate_groups(model.depth, depth);
    DIT_CHECK(!g.groups.empty(), "--method learned: depth ", depth, " does not divide the teacher's ", model.depth,
              " blocks; give --groups M:N,... (groups of M blocks keeping N, tiling the depth)");
  } else {
    g.groups = parse_gate_groups(opt.groups, model.depth, depth);
  }
  // Beyond these ranges (scaling x logits + G) / tau leaves the doubles the softmax can order.
  const auto in = [](const std::vector<double>& v, double lo, double hi) {
    return v.size() == 2 && v[0] >= lo && v[0] <= hi && v[1] >= lo && v[1] <= hi;
  };
  DIT_CHECK(in(opt.tau, kTauRange[0], kTauRange[1]), "--tau ", listed(opt.tau),
            ": expected START,END, two positive temperatures in [0.001, 1000] (e.g. 4,0.1)");
  DIT_CHECK(in(opt.scaling, kScalingRange[0], kScalingRange[1]), "--scaling ", listed(opt.scaling),
            ": expected START,END, two positive logit scales in [0.001, 10000] (e.g. 100,100)");
  g.tau_start = opt.tau[0], g.tau_end = opt.tau[1];
  g.scaling_start = opt.scaling[0], g.scaling_end = opt.scaling[1];
  g.lr = opt.gate_lr > 0 ? opt.gate_lr : 10 * opt.lr;
  DIT_CHECK(g.lr > 0 && std::isfinite(g.lr), "--gate-lr ", opt.gate_lr,
            ": expected a positive learning rate of the logits (default 10 x --lr; give one when --lr is 0)");
  DIT_CHECK(opt.gate_ema >= 0 && opt.gate_ema < 1, "--gate-ema ", opt.gate_ema,
            ": expected an EMA decay in [0, 1) (0: the last logits decide)");
  g.ema_decay = opt.gate_ema;
  return g;
}

// What trains beside the logits: the weights at lr, or the LoRA adapters (their size on this rank).
std::string updates_text(const TrainConfig& t, const Trainer& trainer) {
  char buf[160];
  if (!t.lora.enabled())
    std::snprintf(buf, sizeof buf, "lr %g", t.adamw.lr);
  else
    std::snprintf(buf, sizeof buf, "LoRA rank %d (alpha %g, %lld values on rank 0), lr %g", t.lora.rank,
                  t.lora.scale() * t.lora.rank, static_cast<long long>(trainer.lora()->numel()), t.lora.lr);
  return buf;
}

}  // namespace

LearnedPrune resolve_learned(const PruneOptions& opt, const std::string& teacher, const DiTConfig& model,
                             diffusion::Objective objective, int diffusion_steps, int depth) {
  DIT_CHECK(opt.steps >= 1 && opt.steps <= kMaxSteps, "--steps ", opt.steps, ": expected 1 to ", kMaxSteps,
            " training steps of the gates");
  DIT_CHECK(opt.lr >= 0 && std::isfinite(opt.lr), "--lr ", opt.lr,
            ": expected a learning rate >= 0 of the weights (0: the logits alone train)");
  DIT_CHECK(opt.log_every >= 0, "--log-every ", opt.log_every, ": expected 0 (about 20 lines) or a step count");
  LearnedPrune job;
  job.teacher = teacher;
  job.cfg = learning_config(opt, model, objective, diffusion_steps);
  DIT_CHECK(fs::is_regular_file(job.cfg.data.path), "the training dataset ", job.cfg.data.path, " does not exist",
            opt.data.empty() ? ": give one with --data FILE (dit_mp prepare-data makes one)" : "");
  DIT_CHECK(opt.lora >= 0 && opt.lora <= kMaxLoraRank, "--lora ", opt.lora, ": expected a LoRA rank from 1 to ",
            kMaxLoraRank, ", or 0 for full updates of the weights");
  DIT_CHECK(opt.lora == 0 || opt.lr > 0, "--lora ", opt.lora, " needs --lr > 0 (the adapters' learning rate)");
  TrainConfig t = train_config(job.cfg);
  t.adamw.lr = opt.lora > 0 ? 0 : opt.lr;  // 0: the weights stay (AdamW with lr 0 moves nothing)
  t.lora.rank = opt.lora;
  t.lora.lr = opt.lr;
  t.gates = gate_settings(opt, model, depth);
  t.gates.beta1 = t.adamw.beta1, t.gates.beta2 = t.adamw.beta2, t.gates.eps = t.adamw.eps;
  job.setup = TrainSetup::make(job.cfg.model.dit, t, layout_for_world(job.cfg.parallel.tp, job.cfg.parallel.pp));
  job.log_every = opt.log_every > 0 ? opt.log_every : static_cast<int>(std::max<std::int64_t>(1, opt.steps / 20));
  return job;
}

std::vector<int> learn_kept_blocks(const LearnedPrune& job) {
  const RunConfig& cfg = job.cfg;
  std::unique_ptr<Backend> be = make_rank_backend(cfg.backend_str(), cfg.precision_str());
  ParallelContext ctx = make_mpi_context(job.setup.layout);
  ctx.watch->timeout_s = cfg.parallel.timeout_s;
  attach_backend_comms(ctx, *be);
  std::unique_ptr<Dataset> data;
  collective_check([&] { data = open_dataset(cfg.data.path, cfg.data.latent_scale); });
  Trainer trainer(*be, ctx, job.setup, *data);
  ConsoleLog console;
  RunConfig init = cfg;
  init.run.init_from = job.teacher;
  start_from_checkpoint(init, "", job.setup.model, ctx, trainer, console);
  const LayerGates& gates = *trainer.gates();
  const bool talk = ctx.world_rank == 0;
  const std::int64_t steps = job.setup.train.steps;
  if (talk)
    std::printf("learning which blocks to keep: groups %s, %lld steps at %s (%d images a step), %s, logits' lr "
                "%g, tau %g -> %g, scaling %g -> %g\n",
                groups_text(gates.settings().groups).c_str(), static_cast<long long>(steps),
                job.setup.layout.str().c_str(), static_cast<int>(job.setup.batch.global_batch),
                updates_text(job.setup.train, trainer).c_str(), gates.settings().lr, gates.settings().tau_start,
                gates.settings().tau_end, gates.settings().scaling_start, gates.settings().scaling_end);
  std::vector<int> shown = gates.decision();
  if (talk) std::printf("initial decision: %s\n", blocks_text(shown).c_str());
  std::fflush(stdout);
  const double t0 = now_s();
  for (std::int64_t s = 0; s < steps; ++s) {
    const StepStats st = trainer.step();
    DIT_CHECK(std::isfinite(st.loss), "--method learned: the loss is not finite at step ", s + 1,
              " (lower --lr or --gate-lr)");
    const std::vector<int> now = gates.decision();
    const bool changed = now != shown;
    if (talk && (changed || (s + 1) % job.log_every == 0 || s + 1 == steps)) {
      const double took = now_s() - t0, eta = took / double(s + 1) * double(steps - s - 1);
      std::printf("step %lld/%lld  loss %.5f  tau %.3f  kept %s  confidence %s  %s elapsed, ETA %s%s\n",
                  static_cast<long long>(s + 1), static_cast<long long>(steps), st.loss,
                  gates.settings().tau_at(s, steps), blocks_text(now).c_str(),
                  spaced(gates.confidence(), "%.2f").c_str(),
                  format_duration(took).c_str(), format_duration(eta).c_str(), changed ? "  (decision changed)" : "");
      std::fflush(stdout);
    }
    shown = now;
  }
  if (talk) std::printf("logits (EMA), group by group: %s\n", spaced(gates.ema_logits(), "%.9g").c_str());
  return shown;
}

}  // namespace dit
