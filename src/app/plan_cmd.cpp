// `dit_mp plan` (see plan_cmd.h).
#include "app/plan_cmd.h"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "io/command_files.h"
#include "app/train_cmd.h"
#include "parallel/world.h"
#include "plan/layout_choice.h"
#include "core/resources.h"
#include "plan/planner.h"
#include "plan/predict.h"

namespace dit {

namespace {

// The plan's files by role (io/command_files.h), checked before any is read.
void check_plan_files(const std::string& config, const std::string& calibration, const std::string& json) {
  check_command_files("plan", [&](const FileDecl& d) -> std::string {
    const std::string o = d.option;
    return o == "--config" ? config : o == "--calibration" ? calibration : json;
  });
}

struct PlanFlags {
  TrainFlags train;
  int dp = 1, gpus = 1, top = 10;
  std::string hardware, json, fit, calibration;
  bool predict = false;
  double efficiency = 0.5;
  double host_memory_gib = 0;
};

// --fit: every layout of --gpus devices that fits, ranked by the time model.
void run_fit(const PlanFlags& f, const RunConfig& cfg) {
  FitRequest req;
  req.cfg = cfg;
  req.gpus = f.gpus;
  DIT_CHECK(f.gpus >= 1 && f.gpus <= 4096, "--gpus ", f.gpus, ": expected 1 to 4096");
  DIT_CHECK(f.top >= 1, "--top ", f.top, ": expected the number of rows to print, 1 or more");
  char* end = nullptr;
  const double gib = std::strtod(f.fit.c_str(), &end);
  const bool number = end && *end == '\0' && end != f.fit.c_str();
  req.hw = find_hardware(number ? (f.hardware.empty() ? "h100" : f.hardware) : f.fit);
  if (number) {
    DIT_CHECK(gib > 0 && gib < 1e6, "--fit ", f.fit, ": expected GPU memory in GiB (e.g. 80)");
    req.hw.memory_gib = gib;
  }
  // Mixed precision unless --precision (or train.precision) asks for another.
  req.precisions = {f.train.gave("train.precision") ? cfg.train.precision : DType::BF16};
  req.margin = cfg.parallel.memory_margin;
  req.fixed = fit_constraints([&](const std::string& key) { return f.train.gave(key); }, cfg);  // the flags given pin their settings, as in train --layout auto
  // What dp shards and where the optimizer state lives are searched too (the flags given pin them).
  search_sharding(req, false);
  DIT_CHECK(f.host_memory_gib >= 0 && f.host_memory_gib < 1e7, "--host-memory-gib ", f.host_memory_gib,
            ": expected the GiB of host memory per node (0: unchecked)");
  req.host_memory_gib = f.host_memory_gib;
  const auto rows = fit_layouts(req);
  std::printf("%s", format_fit(req, rows, f.top).c_str());
  if (!f.json.empty()) save_json(f.json, fit_json(rows, f.top));
}

// One layout: its plan, and with --predict its modelled step time.
void run_plan(const PlanFlags& f, const RunConfig& cfg) {
  DIT_CHECK(f.dp >= 1 && f.dp <= 65536, "--dp ", f.dp, ": expected 1 to 65536");
  const Hardware* hw = f.hardware.empty() ? nullptr : &find_hardware(f.hardware);
  const LayoutPlan p = plan_config(cfg, {cfg.parallel.tp, cfg.parallel.pp, f.dp});
  std::printf("%s", format_plan(p, hw).c_str());
  if (f.host_memory_gib > 0) {
    const int per_node = std::min(p.layout.world(), hw ? hw->gpus_per_node : p.layout.world());
    const double need = p.peak_host_need() * per_node;
    std::printf("host memory: %s for %d ranks of a node (offloaded state %s a rank, what a checkpoint save "
                "gathers and buffers %s), of %g GiB: %s\n",
                format_bytes(need).c_str(), per_node, format_bytes(double(p.peak_host_bytes())).c_str(),
                format_bytes(p.peak_host_need() - double(p.peak_host_bytes())).c_str(),
                f.host_memory_gib, need <= f.host_memory_gib * double(1u << 30) ? "fits" : "does NOT fit");
  }
  std::string json = plan_json(p, hw);
  if (f.predict) {
    DIT_CHECK(hw || !f.calibration.empty(), "--predict needs --hardware NAME or --calibration FILE");
    DIT_CHECK(f.efficiency > 0 && f.efficiency <= 1, "--efficiency ", f.efficiency, ": expected a fraction in (0, 1]");
    const PredictParams pp = f.calibration.empty() ? predict_params_for(*hw, cfg.train.precision, f.efficiency)
                                                   : load_predict_params(f.calibration);
    const Prediction r = predict_step(p, pp, cfg.train.global_batch, cfg.parallel.schedule);
    const std::string pj = prediction_json(r, pp);
    std::printf("predicted (a model, not a measurement): %s\n", pj.c_str());
    json.erase(json.find_last_of('}'));
    json += ", \"prediction\": " + pj + "}\n";
  }
  if (!f.json.empty()) save_json(f.json, json);
}

}  // namespace

std::function<int()> add_plan_command(CLI::App& app) {
  auto f = std::make_shared<PlanFlags>();
  CLI::App* cmd = app.add_subcommand(
      "plan", "Per-rank memory of a layout before running it (the trainer's own allocations), or --fit: the layouts "
              "that fit given GPUs, ranked by a time model");
  add_train_options(cmd, f->train);
  cmd->add_option("--dp", f->dp, "Data-parallel size")->capture_default_str();
  cmd->add_option("--hardware", f->hardware,
                  "rtx3090, rtx4090, a100-40g, a100-80g, h100, h200 (or cpu, this machine class): say whether it fits");
  cmd->add_option("--json", f->json, "Also write the plan as JSON to this file");
  cmd->add_option("--fit", f->fit, "Search layouts: GPU memory in GiB (e.g. 80) or a hardware name");
  cmd->add_option("--gpus", f->gpus, "--fit: number of GPUs")->capture_default_str();
  cmd->add_option("--top", f->top, "--fit: rows to print")->capture_default_str();
  cmd->add_option("--host-memory-gib", f->host_memory_gib,
                  "Host memory per node in GiB: layouts whose host memory per node (the offloaded optimizer state of "
                  "optim.offload, and what each rank holds while it saves a checkpoint) exceeds it do not fit (0: "
                  "unchecked); with one layout, say whether it fits")
      ->capture_default_str();
  cmd->add_flag("--predict", f->predict,
                "Also predict the step time (a model: plan FLOPs/bytes, link model, schedule tables simulated)");
  cmd->add_option("--calibration", f->calibration, "--predict: a TOML [predict] table (overrides --hardware)");
  cmd->add_option("--efficiency", f->efficiency, "--predict with --hardware: fraction of peak FLOP/s")
      ->capture_default_str();
  return [cmd, f] {
    if (!*cmd) return -1;
    collective_check([&] {
      if (world_rank() != 0) return;
      check_plan_files(f->train.config, f->calibration, f->json);
      const RunConfig cfg = resolve_config(f->train);
      if (!f->fit.empty()) run_fit(*f, cfg);
      else run_plan(*f, cfg);
    });
    return 0;
  };
}

}  // namespace dit
