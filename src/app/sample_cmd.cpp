// `dit_mp sample` (see sample_cmd.h).
#include "app/sample_cmd.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <sstream>

#include "io/prune_text.h"
#include "io/command_files.h"
#include "engine/dit_pipeline.h"
#include "engine/rank_backend.h"
#include "engine/sampler.h"
#include "io/weights.h"
#include "parallel/backend_comms.h"
#include "parallel/world.h"
#include "plan/memory_fit.h"
#include "run/log.h"
#include "run/sample_output.h"
#include "run/vae_decode.h"
#include "io/atomic_file.h"
#include "io/vae_weights.h"

namespace dit {

namespace fs = std::filesystem;

namespace {

// The files of a sampling request by role (io/command_files.h), checked before any is read.
void check_sample_files(const SampleOptions& opt) {
  // A latent model's --out x.h5 is its raw samples alone (no grid): a .h5 --out names no PNG.
  const bool grid = fs::path(opt.out).extension() != ".h5";
  check_command_files("sample", [&](const FileDecl& d) -> std::string {
    if (declares(d, "--weights")) return opt.weights;
    if (declares(d, "--vae")) return opt.vae;
    if (declares(d, "--vae-config")) return vae_config_path(opt.vae, opt.vae_config);
    if (std::string(d.option) == "--run") return opt.run_dir;
    if (declares(d, "--out")) return grid ? opt.out : "";
    return opt.out;  // its raw samples
  }, RunFolderUse::Kept, opt.overwrite ? ForeignPicture::Replaced : ForeignPicture::Refused);
}

// What to sample from, resolved and checked on every rank.
struct SampleSource {
  SampleOptions opt;
  SampleSection sample;  // the run's [sample] (or the defaults) with the command line's settings
  std::string weights;
  DiTConfig model;
  int diffusion_steps = 1000;
  diffusion::Objective objective = diffusion::Objective::Ddpm;  // what the weights were trained for
  Layout layout;
};

// The sampler settings: the run's [sample] (with --weights: the defaults) and over them the
// command line's, as sample.* overrides through the config's field table, checked once against
// the weights' classes, schedule and objective. Without --sampler, a flow model's default is euler
// (a run's [sample] already fits its objective); a --sampler of the other objective is refused.
SampleSection resolve_settings(const SampleOptions& opt, const SampleSource& src) {
  RunConfig cfg;
  const fs::path config = fs::path(opt.run_dir) / "config.toml";
  if (!opt.run_dir.empty() && fs::is_regular_file(config)) cfg = RunConfig::from_file(config.string());
  cfg.model.dit = src.model;
  cfg.diffusion.steps = src.diffusion_steps;
  cfg.diffusion.objective = src.objective;
  bool sampler_given = false;
  for (const SampleOptions::Setting& s : opt.settings) {
    cfg.set(s.assignment, s.flag);
    sampler_given = sampler_given || s.assignment.rfind("sample.sampler=", 0) == 0;
  }
  using namespace diffusion;
  if (!sampler_given && !sampler_fits(cfg.sample.sampler, src.objective))
    cfg.sample.sampler = src.objective == Objective::Flow ? SamplerKind::Euler : SamplerKind::Ddim;
  cfg.validate_sample();
  return cfg.sample;
}

// The grid and the raw samples beside it are two files: neither a folder nor the same name (that
// neither is an input is the files' check, check_sample_files).
void check_outputs(const std::string& out, const DiTConfig& model, bool decoded) {
  const fs::path png(out), raw = fs::path(out).replace_extension(".h5");
  DIT_CHECK(!out.empty() && !fs::is_directory(png), "--out ", out, " is a folder: give the grid's file name, e.g. ",
            (png / "samples.png").string());
  DIT_CHECK(!fs::is_directory(raw), "--out ", out, ": its raw samples go to ", raw.string(),
            ", which is a folder; choose another --out");
  const bool picture = decoded || model.in_channels == 1 || model.in_channels == 3;
  if (picture) check_writable_target(png.string(), "--out");
  check_writable_target(raw.string(), "--out (its raw samples)");
  DIT_CHECK(!picture || raw != png, "--out ", out, ": the grid (PNG) and its raw samples (", raw.string(),
            ") would be the same file; give the grid a .png name");
}

SampleSource resolve_source(const SampleOptions& requested) {
  SampleSource src;
  src.opt = requested;
  const SampleOptions& opt = src.opt;
  DIT_CHECK(opt.run_dir.empty() != opt.weights.empty(), "give exactly one of --run DIR or --weights FILE");
  src.weights = opt.weights;
  if (!opt.run_dir.empty()) src.weights = (fs::path(opt.run_dir) / "ema.h5").string();
  DIT_CHECK(fs::exists(src.weights), src.weights, " does not exist",
            opt.run_dir.empty() ? "" : " (a run writes ema.h5 when its training finishes)");
  const DiTConfig model = src.model = read_weights_config(src.weights);
  src.diffusion_steps = read_weights_diffusion_steps(src.weights);
  src.objective = read_weights_objective(src.weights);
  src.layout = layout_for_world(opt.tp, opt.pp);
  partition_stages(model, src.layout.pp);
  DIT_CHECK(model.num_heads % src.layout.tp == 0, "--tp ", src.layout.tp, " does not divide the model's ",
            model.num_heads, " heads");
  const SampleSection& s = src.sample = resolve_settings(opt, src);
  DIT_CHECK(opt.batch >= 1 && opt.batch <= 1000000, "--batch ", opt.batch, ": expected 1 to 1000000");
  std::optional<VaeConfig> vae;
  if (!opt.vae.empty()) {
    const VaeFile file = open_vae(opt.vae, opt.vae_config);
    check_vae_fits(file, model.in_channels, "--vae");
    vae = file.config;
  }
  DIT_CHECK(opt.vae_config.empty() || !opt.vae.empty(), "--vae-config ", opt.vae_config, " without --vae");
  check_outputs(opt.out, model, !opt.vae.empty());
  const std::int64_t total =
      std::int64_t(s.per_class) * std::int64_t(s.classes.empty() ? model.num_classes : s.classes.size());
  std::string why;
  DIT_CHECK(backend_available(backend_name(opt.backend, opt.precision), &why), "--backend ", opt.backend,
            " --precision ", opt.precision, ": ", why);
  const int ranks_per_node = std::max(1, world_size() / node_count());
  const SamplingSize size{total, std::min<std::int64_t>(total, opt.batch), s, src.diffusion_steps,
                          opt.backend == "cuda" ? BackendKind::Cuda : BackendKind::Cpu, parse_dtype(opt.precision),
                          vae};
  check_sampling_fits(sampling_memory_need(model, src.layout, size), size, ranks_per_node,
                      "--batch (or --per-class, --classes)");
  return src;
}

}  // namespace

SampleSection check_sample_request(const SampleOptions& opt) { return resolve_source(opt).sample; }

SampleOptions with_run_vae(SampleOptions opt) {
  const fs::path config = fs::path(opt.run_dir) / "config.toml";
  if (opt.vae.empty() && !opt.run_dir.empty() && fs::is_regular_file(config)) {
    const RunConfig cfg = RunConfig::from_file(config.string());
    opt.vae = cfg.data.vae;
    if (opt.vae_config.empty()) opt.vae_config = cfg.data.vae_config;  // a given --vae-config stays
  }
  return opt;
}

SampledImages sample_from_weights(const SampleOptions& requested) {
  SampleSource src;
  collective_check([&] { src = resolve_source(requested); });
  const SampleOptions& opt = src.opt;
  const SampleSection& s = src.sample;
  RankSetup rank = make_rank({.backend = opt.backend, .precision = opt.precision, .layout = src.layout});
  const std::unique_ptr<Backend>& be = rank.backend;
  ParallelContext& ctx = rank.ctx;
  const auto stages = partition_stages(src.model, src.layout.pp);
  DiTStage stage(*be, src.model, stages[ctx.coord.pp], *ctx.tp, src.layout.dp, StageOptions::forward_only());
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
  out.sample = s;
  out.labels = labels;
  for (std::int64_t first = 0; first < total; first += opt.batch) {
    SampleRequest req = sample_request(
        s, {labels.begin() + first, labels.begin() + std::min(total, first + opt.batch)}, src.diffusion_steps,
        samples_latents(src.model, !opt.vae.empty()));
    req.first_index = first;
    req.after_step = [&] { progress.advance(); };
    const std::vector<float> part =
        allocating("sampling " + std::to_string(req.labels.size()) + " images (--per-class, --batch)",
                   [&] { return sample_images(*be, ctx, stage, req); });
    out.samples.insert(out.samples.end(), part.begin(), part.end());
  }
  return out;
}

int run_sample(const SampleOptions& given) {
  SampleOptions opt;
  collective_check([&] { opt = with_run_vae(given); });
  collective_check([&] { check_sample_files(opt); });  // before anything is read
  const SampledImages s = sample_from_weights(opt);
  std::string wrote;
  if (opt.vae.empty()) {
    wrote = write_sample_outputs(s.model, s.samples, s.labels, s.sample.per_class, opt.out);
  } else {
    VaeFile vae;
    const std::int64_t n = static_cast<std::int64_t>(s.labels.size()), side = s.model.input_size;
    collective_check([&] {
      vae = open_vae(opt.vae, opt.vae_config);
      if (world_rank() == 0)
        std::printf("decoding %lld latents with %s over %d ranks\n", static_cast<long long>(n),
                    vae.describe().c_str(), world_size());
    });
    const std::vector<float> images = decode_on_ranks(*watched_world(), vae, opt.backend, s.samples, n, side, side);
    collective_check([&] {
      if (world_rank() != 0) return;
      wrote = write_decoded_outputs(s.model, s.samples, images, vae.config.out_channels,
                                    static_cast<int>(side * vae.config.downsampling()), s.labels, s.sample.per_class,
                                    opt.out);
    });
  }
  if (world_rank() == 0) std::printf("wrote %s\n", wrote.c_str());
  return 0;
}

std::function<std::vector<SampleOptions::Setting>()> add_sampler_options(CLI::App* cmd, SampleOptions& o,
                                                                         int per_class) {
  const std::string run = " (with --run: the run's [sample])";
  // Flag, key, help; the values stay text until RunConfig::set reads them.
  struct Flag {
    const char* flag;
    const char* key;
    std::string help;
    std::string value;  // a default is always applied; none: only when given
    CLI::Option* option = nullptr;
  };
  const SampleSection defaults;
  auto flags = std::make_shared<std::vector<Flag>>(std::vector<Flag>{
      {"--per-class", "per_class", "Images per class row", std::to_string(per_class)},
      {"--classes", "classes", "Comma-separated class rows, e.g. 0,3,7 (default: all)", ""},
      {"--seed", "seed", "Sampling seed", std::to_string(defaults.seed)},
      {"--steps", "num_steps", "Sampler steps" + run, ""},
      {"--sampler", "sampler",
       "ddim or ddpm (ddpm models; default ddim), euler, heun or euler_maruyama (flow models; default euler)" + run,
       ""},
      {"--cfg-scale", "cfg_scale", "Classifier-free guidance scale, 1: none" + run, ""},
      {"--cfg-t-min", "cfg_t_min", "Guide only at noise levels >= this (0: clean; t/T for ddpm, 1 - t for flow)" + run, ""},
      {"--cfg-t-max", "cfg_t_max", "Guide only at noise levels <= this (1: noise; t/T for ddpm, 1 - t for flow)" + run, ""},
      {"--clip-denoised", "clip_denoised",
       "ddpm/ddim: clamp each step's predicted x0 to [-1, 1]: auto (pixels yes; latents, i.e. with --vae or a "
       "model of other than 1 or 3 channels, no, as the official DiT samples them), true or false" + run,
       ""},
  });
  for (Flag& f : *flags) f.option = cmd->add_option(f.flag, f.value, f.help);
  (*flags)[0].option->capture_default_str();
  (*flags)[2].option->capture_default_str();
  auto official = std::make_shared<bool>(false);
  CLI::Option* official_opt = cmd->add_flag("--cfg-official", *official,
                                            "Guide only the first 3 channels, as the official sampler" + run);
  cmd->add_option("--tp", o.tp, "Tensor-parallel size")->capture_default_str();
  cmd->add_option("--pp", o.pp, "Pipeline stages")->capture_default_str();
  cmd->add_option("--backend", o.backend, "cpu or cuda")->capture_default_str();
  cmd->add_option("--precision", o.precision, "fp32, bf16 or fp16 (storage of weights and activations)")
      ->capture_default_str();
  return [flags, official, official_opt] {
    std::vector<SampleOptions::Setting> out;
    for (const Flag& f : *flags) {
      const bool always = std::string(f.key) == "per_class" || std::string(f.key) == "classes" ||
                          std::string(f.key) == "seed";
      if (!always && f.option->count() == 0) continue;
      std::string value = f.value;
      if (std::string(f.key) == "classes") {  // "0,3,7" -> [0, 3, 7]
        value = "[";
        for (int c : parse_int_list(f.value, "--classes")) value += (value.size() > 1 ? ", " : "") + std::to_string(c);
        value += "]";
      }
      out.push_back({std::string(f.flag) + " " + f.value, std::string("sample.") + f.key + "=" + value});
    }
    if (official_opt->count() > 0)
      out.push_back({"--cfg-official", std::string("sample.cfg_official=") + (*official ? "true" : "false")});
    return out;
  };
}

std::function<int()> add_sample_command(CLI::App& app) {
  auto opt = std::make_shared<SampleOptions>();
  CLI::App* cmd =
      app.add_subcommand("sample", "Sample an image grid (PNG) and the raw samples (HDF5) from trained weights");
  cmd->add_option("--run", opt->run_dir, "A training run folder (uses its ema.h5)");
  cmd->add_option("--weights", opt->weights, "A weights HDF5 file (/config and /weights)");
  cmd->add_option("--batch", opt->batch, "Images sampled at once (split over data-parallel replicas)")
      ->capture_default_str();
  auto settings = add_sampler_options(cmd, *opt, SampleSection{}.per_class);
  cmd->add_option("--out", opt->out, "Output PNG (raw samples go to the same name with .h5)")->capture_default_str();
  cmd->add_option("--vae", opt->vae, "A latent model's VAE (safetensors): the grid shows its decoded pictures");
  cmd->add_option("--vae-config", opt->vae_config, "The VAE's config.json (default: beside --vae)");
  cmd->add_flag("--overwrite", opt->overwrite, "Replace a PNG at --out that dit_mp did not write");
  return [cmd, opt, settings] {
    if (!*cmd) return -1;
    collective_check([&] { opt->settings = settings(); });
    return run_sample(*opt);
  };
}

}  // namespace dit
