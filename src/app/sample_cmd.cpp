// `dit_mp sample` (see sample_cmd.h).
#include "app/sample_cmd.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <sstream>

#include "engine/dit_pipeline.h"
#include "engine/rank_backend.h"
#include "engine/sampler.h"
#include "io/weights.h"
#include "parallel/backend_comms.h"
#include "parallel/world.h"
#include "plan/memory_fit.h"
#include "run/log.h"
#include "run/sample_output.h"
#include "io/atomic_file.h"

namespace dit {

namespace fs = std::filesystem;

namespace {

// What to sample from, resolved and checked on every rank.
struct SampleSource {
  SampleOptions opt;  // the sampler settings completed from the run's [sample]
  std::string weights;
  DiTConfig model;
  int diffusion_steps = 1000;
  diffusion::Objective objective = diffusion::Objective::Ddpm;  // what the weights were trained for
  Layout layout;
};

// The sampler fits the weights' objective: without --sampler, a flow model's default is euler (a
// run's [sample] already fits its objective); a --sampler of the other objective is refused.
void check_sampler(SampleOptions& opt, diffusion::Objective objective) {
  using namespace diffusion;
  SamplerKind& k = opt.sample.sampler;
  if (!opt.given.sampler && !sampler_fits(k, objective))
    k = objective == Objective::Flow ? SamplerKind::Euler : SamplerKind::Ddim;
  DIT_CHECK(sampler_fits(k, objective), "--sampler ", name_of(kSamplerNames, k), ": expected ", samplers_of(objective),
            " for a model trained with diffusion.objective = \"", name_of(kObjectiveNames, objective), "\"");
}

// With --run, the settings the command line left out come from the run's [sample].
void take_run_settings(SampleOptions& opt) {
  const fs::path config = fs::path(opt.run_dir) / "config.toml";
  if (!fs::is_regular_file(config)) return;
  const SampleSection s = RunConfig::from_file(config.string()).sample;
  const SampleOptions::Given& g = opt.given;
  SampleSection& o = opt.sample;
  if (!g.steps) o.num_steps = s.num_steps;
  if (!g.sampler) o.sampler = s.sampler;
  if (!g.cfg_scale) o.cfg_scale = s.cfg_scale;
  if (!g.cfg_official) o.cfg_official = s.cfg_official;
  if (!g.cfg_t_min) o.cfg_t_min = s.cfg_t_min;
  if (!g.cfg_t_max) o.cfg_t_max = s.cfg_t_max;
}

// The grid and the raw samples beside it are two files: neither a folder nor the same name.
void check_outputs(const std::string& out, const DiTConfig& model) {
  const fs::path png(out), raw = fs::path(out).replace_extension(".h5");
  DIT_CHECK(!out.empty() && !fs::is_directory(png), "--out ", out, " is a folder: give the grid's file name, e.g. ",
            (png / "samples.png").string());
  DIT_CHECK(!fs::is_directory(raw), "--out ", out, ": its raw samples go to ", raw.string(),
            ", which is a folder; choose another --out");
  const bool picture = model.in_channels == 1 || model.in_channels == 3;
  if (picture) check_writable_target(png.string(), "--out");
  check_writable_target(raw.string(), "--out (its raw samples)");
  DIT_CHECK(!picture || raw != png, "--out ", out, ": the grid (PNG) and its raw samples (", raw.string(),
            ") would be the same file; give the grid a .png name");
}

SampleSource resolve_source(const SampleOptions& requested) {
  SampleSource src;
  src.opt = requested;
  SampleOptions& opt = src.opt;
  const SampleSection& s = opt.sample;
  DIT_CHECK(opt.run_dir.empty() != opt.weights.empty(), "give exactly one of --run DIR or --weights FILE");
  src.weights = opt.weights;
  if (!opt.run_dir.empty()) {
    src.weights = (fs::path(opt.run_dir) / "ema.h5").string();
    take_run_settings(opt);
  }
  DIT_CHECK(fs::exists(src.weights), src.weights, " does not exist",
            opt.run_dir.empty() ? "" : " (a run writes ema.h5 when its training finishes)");
  const DiTConfig model = src.model = read_weights_config(src.weights);
  src.diffusion_steps = read_weights_diffusion_steps(src.weights);
  src.objective = read_weights_objective(src.weights);
  src.layout = layout_for_world(opt.tp, opt.pp);
  partition_stages(model, src.layout.pp);
  DIT_CHECK(model.num_heads % src.layout.tp == 0, "--tp ", src.layout.tp, " does not divide the model's ",
            model.num_heads, " heads");
  for (int c : s.classes)
    DIT_CHECK(c >= 0 && c < model.num_classes, "--classes: class ", c, " outside [0, ", model.num_classes, ")");
  DIT_CHECK(s.per_class >= 1 && s.per_class <= 100000 && s.num_steps >= 2 && s.num_steps <= src.diffusion_steps &&
                s.cfg_scale >= 1.0,
            "--per-class in [1, 100000], 2 <= --steps <= ", src.diffusion_steps,
            " (the model's diffusion.steps) and --cfg-scale >= 1 are required");
  check_sampler(opt, src.objective);
  DIT_CHECK(s.cfg_t_min >= 0 && s.cfg_t_min <= s.cfg_t_max && s.cfg_t_max <= 1, "--cfg-t-min ", s.cfg_t_min,
            " --cfg-t-max ", s.cfg_t_max, ": expected 0 <= min <= max <= 1 (noise levels)");
  DIT_CHECK(opt.batch >= 1 && opt.batch <= 1000000, "--batch ", opt.batch, ": expected 1 to 1000000");
  check_outputs(opt.out, model);
  const std::int64_t total =
      std::int64_t(s.per_class) * std::int64_t(s.classes.empty() ? model.num_classes : s.classes.size());
  const int ranks_per_node = std::max(1, world_size() / node_count());
  check_memory_fits(sampling_memory_need(model, src.layout, std::min<std::int64_t>(total, opt.batch)),
                    ranks_per_node, "--batch");
  std::string why;
  DIT_CHECK(backend_available(backend_name(opt.backend, opt.precision), &why), "--backend ", opt.backend,
            " --precision ", opt.precision, ": ", why);
  return src;
}

}  // namespace

SampledImages sample_from_weights(const SampleOptions& requested) {
  SampleSource src;
  collective_check([&] { src = resolve_source(requested); });
  const SampleOptions& opt = src.opt;
  const SampleSection& s = opt.sample;
  std::unique_ptr<Backend> be = make_rank_backend(opt.backend, opt.precision);
  ParallelContext ctx = make_mpi_context(src.layout);
  attach_backend_comms(ctx, *be);
  const auto stages = partition_stages(src.model, src.layout.pp);
  DiTStage stage(*be, src.model, stages[ctx.coord.pp], *ctx.tp, src.layout.dp);
  collective_check([&] { load_weights(src.weights, stage.params()); });  // every rank reads it: one message
  // Batches of at most opt.batch images; each draws the noise one call for all would (first_index).
  const std::vector<int> labels = grid_labels(s.classes, src.model.num_classes, s.per_class);
  const std::int64_t total = std::int64_t(labels.size()), batches = (total + opt.batch - 1) / opt.batch;
  if (world_rank() == 0) {
    std::printf("sampling: %s, %d steps, CFG %g", name_of(diffusion::kSamplerNames, s.sampler), s.num_steps,
                s.cfg_scale);
    if (s.cfg_scale != 1) std::printf(" at noise levels [%g, %g]", s.cfg_t_min, s.cfg_t_max);
    std::printf("\n");
  }
  Progress progress("sampling " + std::to_string(total) + " images" +
                        (batches > 1 ? " in " + std::to_string(batches) + " batches" : "") + ": step",
                    batches * s.num_steps, ctx.world_rank == 0);
  SampledImages out;
  out.model = src.model;
  out.labels = labels;
  for (std::int64_t first = 0; first < total; first += opt.batch) {
    SampleRequest req = sample_request(
        s, {labels.begin() + first, labels.begin() + std::min(total, first + opt.batch)}, src.diffusion_steps);
    req.first_index = first;
    req.after_step = [&] { progress.advance(); };
    const std::vector<float> part =
        allocating("sampling " + std::to_string(req.labels.size()) + " images (--per-class, --batch)",
                   [&] { return sample_images(*be, ctx, stage, req); });
    out.samples.insert(out.samples.end(), part.begin(), part.end());
  }
  return out;
}

int run_sample(const SampleOptions& opt) {
  const SampledImages s = sample_from_weights(opt);
  const std::string wrote = write_sample_outputs(s.model, s.samples, s.labels, opt.sample.per_class, opt.out);
  if (world_rank() == 0) std::printf("wrote %s\n", wrote.c_str());
  return 0;
}

std::vector<int> parse_ints(const std::string& s, const char* what) {
  std::vector<int> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) {
    if (item.empty()) continue;
    std::size_t used = 0;
    int v = 0;
    try {
      v = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    DIT_CHECK(used == item.size() && used > 0, what, ": '", item, "' is not an integer (expected e.g. 0,3,7)");
    out.push_back(v);
  }
  return out;
}

std::function<SampleOptions::Given()> add_sampler_options(CLI::App* cmd, SampleOptions& o) {
  const std::string run = " (with --run: the run's [sample])";
  SampleSection& s = o.sample;
  auto* steps = cmd->add_option("--steps", s.num_steps, "Sampler steps" + run)->capture_default_str();
  auto* sampler = cmd->add_option_function<std::string>(
                         "--sampler",
                         [&s](const std::string& name) {
                           const auto v = value_of(diffusion::kSamplerNames, name);
                           if (!v)
                             throw CLI::ValidationError("--sampler", "\"" + name + "\": expected one of " +
                                                                         names_of(diffusion::kSamplerNames));
                           s.sampler = *v;
                         },
                         "ddim or ddpm (ddpm models; default ddim), euler, heun or euler_maruyama (flow "
                         "models; default euler)" + run)
                      ->type_name("NAME");
  auto* cfg = cmd->add_option("--cfg-scale", s.cfg_scale, "Classifier-free guidance scale, 1: none" + run)
                  ->capture_default_str();
  auto* official = cmd->add_flag("--cfg-official", s.cfg_official,
                                 "Guide only the first 3 channels, as the official sampler" + run);
  auto* tmin = cmd->add_option("--cfg-t-min", s.cfg_t_min, "Guide only at noise levels >= this (0: clean; t/T for ddpm, 1 - t for flow)" + run)
                   ->capture_default_str();
  auto* tmax = cmd->add_option("--cfg-t-max", s.cfg_t_max, "Guide only at noise levels <= this (1: noise; t/T for ddpm, 1 - t for flow)" + run)
                   ->capture_default_str();
  cmd->add_option("--seed", s.seed, "Sampling seed")->capture_default_str();
  cmd->add_option("--tp", o.tp, "Tensor-parallel size")->capture_default_str();
  cmd->add_option("--pp", o.pp, "Pipeline stages")->capture_default_str();
  cmd->add_option("--backend", o.backend, "cpu or cuda")->capture_default_str();
  cmd->add_option("--precision", o.precision, "fp32, bf16 or fp16 (storage of weights and activations)")
      ->capture_default_str();
  return [=] {
    return SampleOptions::Given{steps->count() > 0, sampler->count() > 0, cfg->count() > 0,
                                official->count() > 0, tmin->count() > 0, tmax->count() > 0};
  };
}

std::function<int()> add_sample_command(CLI::App& app) {
  auto opt = std::make_shared<SampleOptions>();
  auto classes = std::make_shared<std::string>();
  CLI::App* cmd =
      app.add_subcommand("sample", "Sample an image grid (PNG) and the raw samples (HDF5) from trained weights");
  cmd->add_option("--run", opt->run_dir, "A training run folder (uses its ema.h5)");
  cmd->add_option("--weights", opt->weights, "A weights HDF5 file (/config and /weights)");
  cmd->add_option("--classes", *classes, "Comma-separated class rows, e.g. 0,3,7 (default: all)");
  cmd->add_option("--per-class", opt->sample.per_class, "Images per class row")->capture_default_str();
  cmd->add_option("--batch", opt->batch, "Images sampled at once (split over data-parallel replicas)")
      ->capture_default_str();
  auto given = add_sampler_options(cmd, *opt);
  cmd->add_option("--out", opt->out, "Output PNG (raw samples go to the same name with .h5)")->capture_default_str();
  return [cmd, opt, classes, given] {
    if (!*cmd) return -1;
    collective_check([&] { opt->sample.classes = parse_ints(*classes, "--classes"); });
    opt->given = given();
    return run_sample(*opt);
  };
}

}  // namespace dit
