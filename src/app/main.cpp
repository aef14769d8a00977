// dit_mp entry point: MPI start-up, the command line, and the one place errors are reported.
// `train` is the default subcommand (`mpirun -np 8 dit_mp --tp 2 --pp 4`). Library code throws;
// input errors found while setting up, and failures of collective steps such as a checkpoint's
// save or load, are agreed on by all ranks (one message, every rank exits non-zero); any other
// failure later, when ranks may be inside collectives, is printed by its rank and takes the job
// down with MPI_Abort (mpirun -q keeps mpirun's own banners out).
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <functional>
#include <optional>
#include <sstream>

#include "app/collective.h"
#include "app/evaluate.h"
#include "app/plan.h"
#include "app/memory_check.h"
#include "app/predict.h"
#include "app/run_cmds.h"
#include "app/verify.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "io/prepare.h"

namespace {

using dit::AgreedFailure;
using dit::collective_check;
using dit::world_rank;
using dit::world_size;

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

std::vector<int> parse_ints(const std::string& s, const char* what) {
  std::vector<int> out;
  for (const auto& item : split_list(s)) {
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

// Flags of `train`; each becomes a `section.key=value` override applied after the config file.
struct TrainFlags {
  std::string config;
  std::vector<std::string> sets;
  std::vector<std::pair<std::string, std::string>> flags;  // (key, value text)
  bool overwrite = false;
  bool dry_run = false;
};

void add_train_options(CLI::App* cmd, TrainFlags& f) {
  cmd->add_option("--config", f.config, "TOML config file (default: the Fashion-MNIST demo, configs/fashion_mnist.toml)");
  cmd->add_option("--set", f.sets, "Override any config key: --set train.lr=3e-4 (repeatable)");
  cmd->add_flag("--overwrite", f.overwrite, "Replace an existing run folder");
  cmd->add_flag_callback(
      "--sequence-parallel", [&f] { f.flags.emplace_back("parallel.sequence_parallel", "true"); },
      "Megatron sequence parallelism: tokens split over the tp ranks outside the tp GEMMs (tp > 1)");
  struct Flag {
    const char* name;
    const char* key;
    const char* help;
    bool quoted;  // a string value (quoted for TOML)
    const char* type;
  };
  static const Flag flags[] = {
      {"--tp", "parallel.tp", "Tensor-parallel size", false, "INT"},
      {"--pp", "parallel.pp", "Pipeline stages", false, "INT"},
      {"--schedule", "parallel.schedule", "Pipeline schedule: 1f1b or gpipe", true, "TEXT"},
      {"--pp-layers", "parallel.pp_layers", "Blocks per stage, e.g. 3,4,4,3", false, "LIST"},
      {"--virtual-stages", "parallel.virtual_stages", "Model chunks per pipeline rank (> 1: interleaved 1F1B)", false, "INT"},
      {"--steps", "train.steps", "Training steps", false, "INT"},
      {"--global-batch", "train.global_batch", "Images per step over all ranks", false, "INT"},
      {"--micro-batch", "train.micro_batch", "Images per microbatch", false, "INT"},
      {"--lr", "train.lr", "Peak learning rate", false, "FLOAT"},
      {"--seed", "train.seed", "Random seed", false, "INT"},
      {"--log-every", "train.log_every", "Steps between log lines", false, "INT"},
      {"--sample-every", "train.sample_every", "Steps between sample grids (0: only at the end)", false, "INT"},
      {"--backend", "train.backend", "cpu or cuda", true, "TEXT"},
      {"--precision", "train.precision", "fp32, bf16 or fp16", true, "TEXT"},
      {"--run-dir", "run.dir", "Run folder (metrics, samples, weights)", true, "TEXT"},
      {"--data", "data.path", "HDF5 dataset file", true, "TEXT"},
      {"--model", "model.preset", "Model preset, e.g. DiT-S/4", true, "TEXT"},
      {"--resume", "run.resume", "Continue from a checkpoint: auto (the newest of the run) or a path", true, "TEXT"},
      {"--init-from", "run.init_from", "Start from weights: a checkpoint or a weights .h5 file", true, "TEXT"},
      {"--checkpoint-dir", "run.checkpoint_dir", "Checkpoint folder (default: <run dir>/ckpt)", true, "TEXT"},
      {"--checkpoint-every", "train.checkpoint_every", "Steps between checkpoints (0: only at the end)", false, "INT"},
      {"--recompute", "train.recompute", "Activation recomputation: none, selective or full", true, "TEXT"},
      {"--recompute-blocks", "train.recompute_blocks", "Full recomputation for the first K blocks of each stage (0: all)", false, "INT"},
  };
  for (const Flag& fl : flags) {
    cmd->add_option_function<std::string>(
        fl.name,
        [&f, fl](const std::string& v) {
          std::string value = fl.quoted ? "\"" + v + "\"" : v;
          if (std::string(fl.key) == "parallel.pp_layers") value = "[" + v + "]";
          f.flags.emplace_back(fl.key, value);
        },
        fl.help)->type_name(fl.type);
  }
}

// The sampler options `sample` and `evaluate` share. Returns what reports, after parsing, which of
// the run-overridable settings the command line gave (the others come from a --run's [sample]).
std::function<dit::SampleOptions::Given()> add_sampler_options(CLI::App* cmd, dit::SampleOptions& o) {
  const std::string run = " (with --run: the run's [sample])";
  auto* steps = cmd->add_option("--steps", o.steps, "Sampler steps" + run)->capture_default_str();
  auto* sampler = cmd->add_option("--sampler", o.sampler, "ddim or ddpm" + run)->capture_default_str();
  auto* cfg = cmd->add_option("--cfg-scale", o.cfg_scale, "Classifier-free guidance scale, 1: none" + run)
                  ->capture_default_str();
  auto* official = cmd->add_flag("--cfg-official", o.cfg_official,
                                 "Guide only the first 3 channels, as the official sampler" + run);
  auto* tmin = cmd->add_option("--cfg-t-min", o.cfg_t_min, "Guide only at noise levels t/T >= this (0: clean)" + run)
                   ->capture_default_str();
  auto* tmax = cmd->add_option("--cfg-t-max", o.cfg_t_max, "Guide only at noise levels t/T <= this (1: noise)" + run)
                   ->capture_default_str();
  cmd->add_option("--seed", o.seed, "Sampling seed")->capture_default_str();
  cmd->add_option("--tp", o.tp, "Tensor-parallel size")->capture_default_str();
  cmd->add_option("--pp", o.pp, "Pipeline stages")->capture_default_str();
  cmd->add_option("--backend", o.backend, "cpu or cuda")->capture_default_str();
  cmd->add_option("--precision", o.precision, "fp32, bf16 or fp16 (storage of weights and activations)")
      ->capture_default_str();
  return [=] {
    return dit::SampleOptions::Given{steps->count() > 0, sampler->count() > 0, cfg->count() > 0,
                                     official->count() > 0, tmin->count() > 0, tmax->count() > 0};
  };
}

bool pflags_has(const TrainFlags& f, const std::string& key) {
  for (const auto& s : f.sets)
    if (s.rfind(key + "=", 0) == 0) return true;
  for (const auto& [k, v] : f.flags)
    if (k == key) return true;
  return false;
}

dit::RunConfig resolve_config(const TrainFlags& f) {
  dit::RunConfig cfg = f.config.empty() ? dit::RunConfig::demo() : dit::RunConfig::from_file(f.config);
  for (const auto& s : f.sets) cfg.set(s);
  for (const auto& [key, value] : f.flags) cfg.set(key + "=" + value);
  if (f.overwrite) cfg.run.overwrite = true;
  cfg.validate();
  return cfg;
}

// `train` is the default: insert it when the first argument is not a subcommand.
std::vector<std::string> with_default_subcommand(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  static const char* subs[] = {"train", "sample", "evaluate", "verify", "prepare-data", "inspect", "plan", "help"};
  const bool top_level = !args.empty() && (args[0] == "--help" || args[0] == "-h" || args[0] == "--version");
  bool has_sub = false;
  if (!args.empty())
    for (const char* s : subs) has_sub |= args[0] == s;
  if (!has_sub && !top_level) args.insert(args.begin(), "train");
  if (!args.empty() && args[0] == "help") args[0] = "--help";
  std::reverse(args.begin(), args.end());  // CLI11 parses a reversed vector
  return args;
}

int run(int argc, char** argv) {
  CLI::App app{"dit_mp: trains Diffusion Transformers (DiT) split over MPI ranks: tensor (--tp), pipeline (--pp) "
               "and data parallelism (the remaining ranks).\n  mpirun -np 8 dit_mp --tp 2 --pp 4     trains the "
               "Fashion-MNIST demo\n"};
  app.name("dit_mp");
  app.require_subcommand(0, 1);
  app.set_version_flag("--version", "dit_mp 0.1");

  TrainFlags tflags;
  auto* train = app.add_subcommand("train", "Train a DiT (the default subcommand)");
  add_train_options(train, tflags);
  train->add_flag("--dry-run", tflags.dry_run, "Check the inputs, print the layout and the rank map, and stop");

  dit::SampleOptions sopt;
  std::string classes;
  auto* sample = app.add_subcommand("sample", "Sample an image grid (PNG) and the raw samples (HDF5) from trained weights");
  sample->add_option("--run", sopt.run_dir, "A training run folder (uses its ema.h5)");
  sample->add_option("--weights", sopt.weights, "A weights HDF5 file (/config and /weights)");
  sample->add_option("--classes", classes, "Comma-separated class rows, e.g. 0,3,7 (default: all)");
  sample->add_option("--per-class", sopt.per_class, "Images per class row")->capture_default_str();
  sample->add_option("--batch", sopt.batch, "Images sampled at once (split over data-parallel replicas)")
      ->capture_default_str();
  auto sample_given = add_sampler_options(sample, sopt);
  sample->add_option("--out", sopt.out, "Output PNG (raw samples go to the same name with .h5)")->capture_default_str();

  dit::EvaluateOptions eopt;
  eopt.sample.per_class = 100;
  std::string eval_classes;
  auto* evaluate = app.add_subcommand(
      "evaluate", "Sample quality: FID, precision/recall and class accuracy in a classifier's feature space against "
                  "a labelled reference set, with the real-data floor (samples drawn from weights, or a samples file)");
  evaluate->add_option("--run", eopt.sample.run_dir, "A training run folder (its ema.h5 and config.toml)");
  evaluate->add_option("--weights", eopt.sample.weights, "A weights HDF5 file");
  evaluate->add_option("--samples", eopt.samples_file, "A samples HDF5 file (samples, labels), e.g. from dit_mp sample");
  evaluate->add_option("--config", eopt.config, "Config naming data.path and [eval] (default: the run's, else the demo's)");
  evaluate->add_option("--reference", eopt.reference, "Reference dataset HDF5 (default: <data.path>_test.h5)");
  evaluate->add_option("--classifier", eopt.classifier, "Classifier HDF5 (default: <data.path>_classifier.h5, trained when missing)");
  evaluate->add_option("--train-data", eopt.train_data, "Training dataset for the floor and the classifier (default: data.path)");
  evaluate->add_flag("--train-classifier", eopt.train_classifier, "Train the classifier (again) before evaluating");
  evaluate->add_option("--classifier-epochs", eopt.classifier_epochs, "Epochs when training the classifier")
      ->capture_default_str();
  evaluate->add_option("--json", eopt.json, "Write the result as JSON (default with --run: <run>/eval.json)");
  evaluate->add_option("--samples-out", eopt.samples_out, "Also write the drawn samples (HDF5)");
  evaluate->add_option("--inception", eopt.inception,
                       "Inception-V3 FID weights (HDF5, from tools/convert_inception.py): FID in its pool features");
  evaluate->add_option("--reference-stats", eopt.reference_stats, "With --inception: reference mu/sigma (.npz)");
  evaluate->add_option("--classes", eval_classes, "Comma-separated classes (default: all)");
  evaluate->add_option("--per-class", eopt.sample.per_class, "Samples per class")->capture_default_str();
  evaluate->add_option("--batch", eopt.sample.batch, "Images sampled at once (split over data-parallel replicas)")
      ->capture_default_str();
  auto evaluate_given = add_sampler_options(evaluate, eopt.sample);

  dit::VerifyOptions vopt;
  std::string groups, schedule = "1f1b";
  int tp = 1, pp = 1;
  auto* verify = app.add_subcommand(
      "verify", "Check the model against a golden file of float64 numbers from the official DiT, at any layout");
  verify->add_option("--golden", vopt.golden, "Golden HDF5 file")->required();
  verify->add_option("--groups", groups, "Comma-separated: forward,schedule,loss,adamw,ema,sample (default: all)");
  verify->add_option("--backend", vopt.backend, "Compute backend: cpu or cuda")->capture_default_str();
  verify->add_option("--precision", vopt.precision,
                     "fp32 (tolerance 1e-4) or bf16/fp16 storage (tolerance 2e-2)")->capture_default_str();
  verify->add_option("--tp", tp, "Tensor-parallel size")->capture_default_str();
  verify->add_option("--pp", pp, "Pipeline stages")->capture_default_str();
  verify->add_option("--microbatches", vopt.microbatches, "Microbatches per data-parallel rank")->capture_default_str();
  verify->add_option("--schedule", schedule, "Pipeline schedule: 1f1b or gpipe")->capture_default_str();
  verify->add_option("--virtual-stages", vopt.virtual_stages,
                     "Model chunks per pipeline rank (> 1: interleaved 1F1B)")->capture_default_str();
  std::string verify_recompute = "none";
  verify->add_option("--recompute", verify_recompute, "Activation recomputation: none, selective or full")
      ->capture_default_str();
  verify->add_option("--recompute-blocks", vopt.stage.recompute_blocks,
                     "Full recomputation for the first K blocks of each stage (0: all)")->capture_default_str();
  verify->add_flag("--sequence-parallel", vopt.stage.sequence_parallel,
                   "Megatron sequence parallelism (tp > 1 dividing the tokens)");

  std::string kind, src, out, features, labels_dir, split = "train";
  int size = 32;
  double scale = 0.18215;
  bool overwrite = false;
  auto* prep = app.add_subcommand("prepare-data", "Write an HDF5 dataset: fashion-mnist, images DIR, or latents");
  prep->add_option("kind", kind, "fashion-mnist | images | latents")->required();
  prep->add_option("dir", src, "images: a folder of class sub-folders; fashion-mnist: the IDX folder");
  prep->add_option("--out", out, "Output HDF5 file")->required();
  prep->add_option("--split", split, "fashion-mnist: train or test")->capture_default_str();
  prep->add_option("--size", size, "images: output side in pixels")->capture_default_str();
  prep->add_option("--features", features, "latents: folder of <i>.npy features (1, 4, H, W)");
  prep->add_option("--labels", labels_dir, "latents: folder of <i>.npy labels");
  prep->add_option("--scale", scale, "latents: scale factor applied when training")->capture_default_str();
  prep->add_flag("--overwrite", overwrite, "Replace an existing output file");

  TrainFlags pflags;
  int plan_dp = 1, plan_gpus = 1, plan_top = 10;
  std::string plan_hw, plan_json_path, plan_fit;
  auto* plan = app.add_subcommand(
      "plan", "Per-rank memory of a layout before running it (the trainer's own allocations), or --fit: the layouts "
              "that fit given GPUs, ranked by a time model");
  add_train_options(plan, pflags);
  plan->add_option("--dp", plan_dp, "Data-parallel size")->capture_default_str();
  plan->add_option("--hardware", plan_hw, "rtx3090, rtx4090, a100-40g, a100-80g, h100, h200 (or cpu, this machine class): say whether it fits");
  plan->add_option("--json", plan_json_path, "Also write the plan as JSON to this file");
  plan->add_option("--fit", plan_fit, "Search layouts: GPU memory in GiB (e.g. 80) or a hardware name");
  plan->add_option("--gpus", plan_gpus, "--fit: number of GPUs")->capture_default_str();
  plan->add_option("--top", plan_top, "--fit: rows to print")->capture_default_str();
  bool plan_predict = false;
  std::string plan_calibration;
  double plan_efficiency = 0.5;
  plan->add_flag("--predict", plan_predict,
                 "Also predict the step time (a model: plan FLOPs/bytes, link model, schedule tables simulated)");
  plan->add_option("--calibration", plan_calibration, "--predict: a TOML [predict] table (overrides --hardware)");
  plan->add_option("--efficiency", plan_efficiency, "--predict with --hardware: fraction of peak FLOP/s")
      ->capture_default_str();

  std::string inspect_path;
  auto* inspect = app.add_subcommand("inspect", "List a checkpoint's tensors, shapes, layout and step; verify its checksums");
  inspect->add_option("checkpoint", inspect_path, "A checkpoint step folder (or its root)")->required();

  std::vector<std::string> args = with_default_subcommand(argc, argv);
  dit::fit_threads_to_cores();
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    return world_rank() == 0 ? app.exit(e) : (e.get_exit_code() != 0);
  }

  if (*train) {
    dit::RunConfig cfg;
    collective_check([&] { cfg = resolve_config(tflags); });
    return dit::run_train(cfg, tflags.dry_run ? dit::TrainMode::DryRun : dit::TrainMode::Train);
  }
  if (*sample) {
    collective_check([&] { sopt.classes = parse_ints(classes, "--classes"); });
    sopt.given = sample_given();
    return dit::run_sample(sopt);
  }
  if (*evaluate) {
    collective_check([&] { eopt.sample.classes = parse_ints(eval_classes, "--classes"); });
    eopt.sample.given = evaluate_given();
    return dit::run_evaluate(eopt);
  }
  if (*verify) {
    vopt.groups = split_list(groups);
    dit::Layout layout;
    collective_check([&] {
      vopt.schedule = dit::parse_schedule(schedule);
      vopt.stage.recompute = dit::parse_recompute(verify_recompute);
      layout = dit::layout_for_world(tp, pp);
      dit::check_verify_inputs(vopt, layout);
    });
    dit::ParallelContext ctx = dit::make_mpi_context(layout);
    return dit::run_verify(vopt, ctx);
  }
  if (*plan) {
    collective_check([&] {
      if (world_rank() != 0) return;
      const dit::RunConfig cfg = resolve_config(pflags);
      if (!plan_fit.empty()) {
        dit::FitRequest req;
        req.cfg = cfg;
        req.gpus = plan_gpus;
        DIT_CHECK(plan_gpus >= 1 && plan_gpus <= 4096, "--gpus ", plan_gpus, ": expected 1 to 4096");
        char* end = nullptr;
        const double gib = std::strtod(plan_fit.c_str(), &end);
        const bool number = end && *end == '\0' && end != plan_fit.c_str();
        req.hw = dit::find_hardware(number ? (plan_hw.empty() ? "h100" : plan_hw) : plan_fit);
        if (number) {
          DIT_CHECK(gib > 0 && gib < 1e6, "--fit ", plan_fit, ": expected GPU memory in GiB (e.g. 80)");
          req.hw.memory_gib = gib;
        }
        // Mixed precision unless --precision (or train.precision) asks for another.
        req.precisions = {pflags_has(pflags, "train.precision") ? cfg.train.precision : "bf16"};
        const auto rows = dit::fit_layouts(req);
        std::printf("%s", dit::format_fit(req, rows, plan_top).c_str());
        if (!plan_json_path.empty()) dit::save_json(plan_json_path, dit::fit_json(rows, plan_top));
        return;
      }
      DIT_CHECK(plan_dp >= 1 && plan_dp <= 65536, "--dp ", plan_dp, ": expected 1 to 65536");
      const dit::Hardware* hw = plan_hw.empty() ? nullptr : &dit::find_hardware(plan_hw);
      const dit::LayoutPlan p = dit::plan_layout(cfg, {cfg.parallel.tp, cfg.parallel.pp, plan_dp});
      std::printf("%s", dit::format_plan(p, hw).c_str());
      std::string json = dit::plan_json(p, hw);
      if (plan_predict) {
        DIT_CHECK(hw || !plan_calibration.empty(), "--predict needs --hardware NAME or --calibration FILE");
        DIT_CHECK(plan_efficiency > 0 && plan_efficiency <= 1, "--efficiency ", plan_efficiency,
                  ": expected a fraction in (0, 1]");
        const dit::PredictParams pp = plan_calibration.empty()
                                          ? dit::predict_params_for(*hw, cfg.train.precision, plan_efficiency)
                                          : dit::load_predict_params(plan_calibration);
        const dit::Prediction r =
            dit::predict_step(p, pp, cfg.train.global_batch, dit::parse_schedule(cfg.parallel.schedule));
        const std::string pj = dit::prediction_json(r, pp);
        std::printf("predicted (a model, not a measurement): %s\n", pj.c_str());
        json.erase(json.find_last_of('}'));
        json += ", \"prediction\": " + pj + "}\n";
      }
      if (!plan_json_path.empty()) dit::save_json(plan_json_path, json);
    });
    return 0;
  }
  if (*inspect) {
    collective_check([&] {
      if (world_rank() == 0) std::printf("%s", dit::inspect_checkpoint(inspect_path).c_str());
    });
    return 0;
  }
  if (*prep) {
    const dit::Overwrite ow = overwrite ? dit::Overwrite::Yes : dit::Overwrite::No;
    collective_check([&] {
      if (world_rank() != 0) return;
      if (kind == "fashion-mnist") {
        dit::prepare_fashion_mnist(src.empty() ? dit::kFashionMnistDir : src, out, split, ow);
      } else if (kind == "images") {
        DIT_CHECK(!src.empty(), "prepare-data images: give the folder of class sub-folders");
        dit::prepare_images(src, out, size, ow);
      } else if (kind == "latents") {
        DIT_CHECK(!features.empty() && !labels_dir.empty(), "prepare-data latents: give --features and --labels");
        dit::prepare_latents(features, labels_dir, out, scale, ow);
      } else {
        DIT_FAIL("prepare-data: unknown kind '", kind, "': expected fashion-mnist, images or latents");
      }
      std::printf("wrote %s\n", out.c_str());
    });
    return 0;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  int rc = 1;
  try {
    rc = run(argc, argv);
  } catch (const AgreedFailure&) {
    rc = 1;
  } catch (const dit::AgreedError& e) {  // every rank has it: one prints, none aborts
    if (world_rank() == 0) dit::print_error(e.what(), e.origin_rank());
    rc = 1;
  } catch (const std::exception& e) {
    dit::print_error(dit::describe_exception(e).c_str());
    if (world_size() > 1) MPI_Abort(MPI_COMM_WORLD, 1);
    rc = 1;
  }
  // Every rank ends with the worst exit code (e.g. verify's result, known on rank 0).
  int worst = rc;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}
