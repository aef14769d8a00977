// The layout measured among the search's candidates (see layout_tune.h).
#include "run/layout_tune.h"

#include <algorithm>
#include <cstdio>
#include <memory>

#include "core/error.h"
#include "core/resources.h"
#include "engine/rank_backend.h"
#include "engine/train_setup.h"
#include "engine/trainer.h"
#include "io/h5_dataset.h"
#include "parallel/world.h"
#include "plan/layout_choice.h"
#include "run/log.h"

namespace dit {

namespace {

std::string describe(const RunConfig& c) {
  const Layout l = layout_for_world(c.parallel.tp, c.parallel.pp);
  std::string s = l.str() + ", micro-batch " + std::to_string(c.train.micro_batch) + ", recompute " +
                  recompute_name(c.train.recompute) + ", " + schedule_name(c.parallel.schedule);
  if (c.parallel.virtual_stages > 1) s += " v " + std::to_string(c.parallel.virtual_stages);
  if (c.parallel.sequence_parallel) s += ", sequence parallel";
  return s;
}

// Trains `c` for its tune_steps steps from the start on a grid of its own; the slowest rank's mean
// step after the first, and the largest rank's account of its memory.
void measure(TuneTrial& t) {
  const RunConfig& c = t.cfg;
  const bool peak_known = reset_peak_rss();
  const Layout layout = layout_for_world(c.parallel.tp, c.parallel.pp);
  const TrainSetup setup = TrainSetup::make(c, layout);
  RankSetup rank = make_rank({.backend = c.backend_str(),
                              .precision = c.precision_str(),
                              .layout = layout,
                              .timeout_s = c.parallel.timeout_s,
                              .timeout_setting = "parallel.timeout_s"});
  rank.backend->set_deterministic(c.train.deterministic);
  std::unique_ptr<Dataset> data;
  collective_check([&] { data = open_dataset(c.data.path, c.data.latent_scale); });
  Trainer trainer(*rank.backend, rank.ctx, setup, *data);
  double timed = 0;
  for (int i = 0; i < c.parallel.tune_steps; ++i) {
    const StepStats st = trainer.step();
    if (i > 0) timed += st.acct.step_s;
  }
  Comm& world = *rank.ctx.world;
  t.measured_s = world.all_reduce_max(timed / double(c.parallel.tune_steps - 1));
  t.measured_bytes = world.all_reduce_max(double(trainer.memory().total()));
  t.peak_rss = world.all_reduce_max(peak_known ? double(peak_rss_bytes()) : 0.0);
}

std::string num(double v) { return json_number(v); }

}  // namespace

TuneResult tune_layout(const RunConfig& cfg, const FitConstraints& fixed) {
  TuneResult out;
  for (const LayoutCandidate& c : layout_candidates(cfg, fixed, cfg.parallel.tune_candidates)) {
    TuneTrial t;
    t.cfg = c.cfg;
    t.cfg.parallel.layout = LayoutMode::Tune;
    t.layout = describe(c.cfg);
    t.predicted_s = c.predicted_s;
    t.predicted_bytes = c.predicted_bytes;
    if (world_rank() == 0) {
      std::printf("layout tune: trying %s for %d steps\n", t.layout.c_str(), cfg.parallel.tune_steps);
      std::fflush(stdout);
    }
    measure(t);
    out.trials.push_back(std::move(t));
  }
  for (std::size_t i = 1; i < out.trials.size(); ++i)
    if (out.trials[i].measured_s < out.trials[std::size_t(out.best)].measured_s) out.best = int(i);
  out.chosen = out.trials[std::size_t(out.best)].cfg;
  reset_peak_rss();  // the run's own peak starts after the trials

  // The record: predicted against measured, and by how much the time model missed.
  char line[512];
  std::snprintf(line, sizeof line, "layout tune: %zu layouts measured for %d steps each (the first untimed), training on #%d\n",
                out.trials.size(), cfg.parallel.tune_steps, out.best + 1);
  out.table = line;
  out.table += "  #  layout                                                          predicted   measured   off by   planned  accounted  peak RSS\n";
  out.json = "{\"steps\": " + std::to_string(cfg.parallel.tune_steps) + ", \"chosen\": " + std::to_string(out.best) +
             ", \"trials\": [";
  for (std::size_t i = 0; i < out.trials.size(); ++i) {
    const TuneTrial& t = out.trials[i];
    const double off = t.predicted_s > 0 ? t.measured_s / t.predicted_s : 0;
    std::snprintf(line, sizeof line, "%s%2zu  %-62s %8.1f ms %8.1f ms %7.2fx %9s %10s %9s\n", int(i) == out.best ? "*" : " ",
                  i + 1, t.layout.c_str(), t.predicted_s * 1e3, t.measured_s * 1e3, off,
                  format_bytes(t.predicted_bytes).c_str(), format_bytes(t.measured_bytes).c_str(),
                  t.peak_rss > 0 ? format_bytes(t.peak_rss).c_str() : "?");
    out.table += line;
    out.json += std::string(i ? ", " : "") + "{\"layout\": \"" + t.layout + "\", \"tp\": " + std::to_string(t.cfg.parallel.tp) +
                ", \"pp\": " + std::to_string(t.cfg.parallel.pp) + ", \"micro_batch\": " +
                std::to_string(t.cfg.train.micro_batch) + ", \"predicted_step_s\": " + num(t.predicted_s) +
                ", \"measured_step_s\": " + num(t.measured_s) + ", \"measured_over_predicted\": " + num(off) +
                ", \"predicted_bytes\": " + num(t.predicted_bytes) + ", \"measured_bytes\": " + num(t.measured_bytes) + ", \"peak_rss_bytes\": " + num(t.peak_rss) + "}";
  }
  out.json += "]}\n";
  if (world_rank() == 0) {
    std::printf("%s", out.table.c_str());
    std::fflush(stdout);
  }
  return out;
}

}  // namespace dit
