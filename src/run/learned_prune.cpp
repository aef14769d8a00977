// Learned pruning's training run (see learned_prune.h).
#include "run/learned_prune.h"

#include <cmath>
#include <cstdio>

#include "core/clock.h"
#include "core/resources.h"
#include "engine/prune.h"
#include "engine/rank_backend.h"
#include "engine/step_parts.h"
#include "engine/trainer.h"
#include "io/h5_dataset.h"
#include "parallel/backend_comms.h"
#include "parallel/world.h"
#include "run/resume.h"

namespace dit {

namespace {

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

// What trains beside the logits: the weights at lr, or the LoRA adapters (their size on this rank).
std::string updates_text(const TrainConfig& t, const Trainer& trainer) {
  const LoraPart* lora = trainer.part<LoraPart>();
  char buf[160];
  if (!t.lora.enabled())
    std::snprintf(buf, sizeof buf, "lr %g", t.adamw.lr);
  else
    std::snprintf(buf, sizeof buf, "LoRA rank %d (alpha %g, %lld values on rank 0), lr %g", t.lora.rank,
                  t.lora.scale() * t.lora.rank, static_cast<long long>(lora->adapters().numel()), t.lora.lr);
  return buf;
}

}  // namespace

std::vector<int> learn_kept_blocks(const LearnedPrune& job) {
  const RunConfig& cfg = job.cfg;
  RankSetup rank = make_rank({.backend = cfg.backend_str(),
                              .precision = cfg.precision_str(),
                              .layout = job.setup.layout,
                              .timeout_s = cfg.parallel.timeout_s,
                              .timeout_setting = "parallel.timeout_s"});
  const std::unique_ptr<Backend>& be = rank.backend;
  ParallelContext& ctx = rank.ctx;
  std::unique_ptr<Dataset> data;
  collective_check([&] { data = open_dataset(cfg.data.path, cfg.data.latent_scale); });
  Trainer trainer(*be, ctx, job.setup, *data);
  ConsoleLog console;
  RunConfig init = cfg;
  init.run.init_from = job.teacher;
  start_from_checkpoint(init, "", job.setup.model, ctx, trainer, console, DataKind::Unknown);
  const LayerGates& gates = trainer.part<GatePart>()->gates();
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
  trainer.train_to(steps, [&](std::int64_t done, const StepStats& st) {
    DIT_CHECK(std::isfinite(st.loss), "--method learned: the loss is not finite at step ", done,
              " (lower --lr or --gate-lr)");
    const std::vector<int> now = gates.decision();
    const bool changed = now != shown;
    if (talk && (changed || done % job.log_every == 0 || done == steps)) {
      const double took = now_s() - t0, eta = took / double(done) * double(steps - done);
      std::printf("step %lld/%lld  loss %.5f  tau %.3f  kept %s  confidence %s  %s elapsed, ETA %s%s\n",
                  static_cast<long long>(done), static_cast<long long>(steps), st.loss,
                  gates.settings().tau_at(done - 1, steps), blocks_text(now).c_str(),
                  spaced(gates.confidence(), "%.2f").c_str(),
                  format_duration(took).c_str(), format_duration(eta).c_str(), changed ? "  (decision changed)" : "");
      std::fflush(stdout);
    }
    shown = now;
    return 0;
  });
  if (talk) std::printf("logits (EMA), group by group: %s\n", spaced(gates.ema_logits(), "%.9g").c_str());
  return shown;
}

}  // namespace dit
