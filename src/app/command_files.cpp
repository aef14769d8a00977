// The declarations of every subcommand's files and their binders (see command_files.h). An option
// spelled "@name" is positional; one without "--" is a config key set with --set KEY="PATH".
#include "app/command_files.h"

#include <filesystem>

#include "core/error.h"

namespace dit {

namespace fs = std::filesystem;

namespace {

using K = FileKind;
constexpr FileRole In = FileRole::Input, Out = FileRole::Output;

const std::vector<CommandFiles> kCommands = {
    {"train",
     {{"--config", In, K::Config, "the run's configuration"},
      {"--data", In, K::Dataset, "the training data", "", "data.path"},
      {"--init-from", In, K::WeightsOrCheckpoint, "the weights the run starts from", "", "run.init_from"},
      {"--resume", In, K::Checkpoint, "the checkpoint resumed", "", "run.resume"},
      {"--teacher", In, K::Weights, "the teacher", "", "distill.teacher"},
      {"eval.reference", In, K::Dataset, "the evaluation's reference set", "", "eval.reference"},
      {"eval.classifier", In, K::Classifier, "the evaluation's classifier", "", "eval.classifier"},
      {"--run-dir", Out, K::RunFolder, "the run folder", "", "run.dir"},
      {"--run-dir", Out, K::Weights, "the EMA weights", "dir:ema.h5", "run.dir"},
      {"--run-dir", Out, K::Weights, "the model's weights", "dir:model.h5", "run.dir"},
      {"--run-dir", Out, K::Png, "the sample grid", "dir:samples.png", "run.dir"},
      {"--run-dir", Out, K::RawSamples, "the raw samples", "dir:samples.h5", "run.dir"},
      {"--run-dir", Out, K::RunConfig, "the run's config record", "dir:config.toml", "run.dir"},
      {"--run-dir", Out, K::Json, "the metrics", "dir:metrics.jsonl", "run.dir"},
      {"--run-dir", Out, K::Json, "the accounting", "dir:accounting.json", "run.dir"},
      {"--run-dir", Out, K::Json, "the evaluation's result", "dir:eval.json", "run.dir"},
      {"--checkpoint-dir", Out, K::CheckpointRoot, "the checkpoints", "", "run.checkpoint_dir"}}},
    {"sample",
     {{"--weights", In, K::Weights, "the weights being sampled"},
      {"--run", In, K::Weights, "the weights being sampled", "dir:ema.h5"},
      {"--run", In, K::Config, "the run's sampler settings", "dir:config.toml"},
      {"--out", Out, K::Png, "the grid"},
      {"--out", Out, K::RawSamples, "the raw samples", "ext:.h5"}}},
    {"evaluate",
     {{"--run", In, K::Weights, "the weights being evaluated", "dir:ema.h5"},
      {"--run", In, K::Config, "the run's configuration", "dir:config.toml"},
      {"--weights", In, K::Weights, "the weights being evaluated"},
      {"--samples", In, K::RawSamples, "the samples being evaluated"},
      {"--config", In, K::Config, "the configuration naming the data"},
      {"--reference", In, K::Dataset, "the reference dataset"},
      {"--classifier", In, K::Classifier, "the classifier"},
      {"--train-data", In, K::Dataset, "the training dataset"},
      {"--inception", In, K::Inception, "the Inception-V3 weights"},
      {"--reference-stats", In, K::Zip, "the reference statistics"},
      {"--json", Out, K::Json, "the result"},
      {"--run", Out, K::Json, "the result", "dir:eval.json"},
      {"--samples-out", Out, K::RawSamples, "the drawn samples"}}},
    {"verify", {{"--golden", In, K::Golden, "the golden numbers"}}},
    {"prepare-data",
     {{"@dir", In, K::Folder, "the source images"},
      {"--features", In, K::Folder, "the latent features"},
      {"--labels", In, K::Folder, "the labels"},
      {"--out", Out, K::Dataset, "the dataset written"}}},
    {"inspect", {{"@checkpoint", In, K::Checkpoint, "the checkpoint inspected"}}},
    {"plan",
     {{"--config", In, K::Config, "the run's configuration"},
      {"--calibration", In, K::Config, "the time model's calibration"},
      {"--json", Out, K::Json, "the plan"}}},
    {"prune",
     {{"--run", In, K::Weights, "the teacher", "dir:ema.h5"},
      {"--run", In, K::Config, "the run's configuration", "dir:config.toml"},
      {"--weights", In, K::Weights, "the teacher"},
      {"--data", In, K::Dataset, "the calibration data"},
      {"--out", Out, K::Weights, "the pruned weights"}}},
};

bool g_files_check_only = false;

bool is(const FileDecl& d, const char* option, const char* derive = "") {
  return std::string(d.option) == option && std::string(d.derive) == derive;
}

// Binds `command`'s declarations with `value` and runs the one check.
void check_bound(const char* command, const std::function<std::string(const FileDecl&)>& value,
                 bool replaces_run_folder = false) {
  FilePlan plan(command);
  plan.bind(files_of(command), value);
  if (replaces_run_folder) plan.replace_whole(FileKind::RunFolder);
  plan.check();
  if (g_files_check_only) throw Error(kFilesPassed);
}

}  // namespace

void set_files_check_only(bool on) { g_files_check_only = on; }

const std::vector<CommandFiles>& command_files() { return kCommands; }

const std::vector<FileDecl>& files_of(const std::string& command) {
  for (const CommandFiles& c : kCommands)
    if (command == c.command) return c.files;
  DIT_FAIL("files_of: no declaration of the files of '", command, "'");
}

void check_train_files(const RunConfig& cfg, const std::string& config) {
  const EvalPaths eval = eval_paths(cfg);  // declared even when train.eval_every = 0: never to be overwritten
  check_bound(
      "train",
      [&](const FileDecl& d) -> std::string {
        const std::string key = d.key;
        if (key == "data.path") return cfg.data.path;
        if (key == "run.init_from") return cfg.run.init_from;
        if (key == "run.resume") return cfg.run.resume == "auto" ? "" : cfg.run.resume;
        if (key == "distill.teacher") return cfg.distill.teacher;
        if (key == "eval.reference") return eval.reference;
        if (key == "eval.classifier") return eval.classifier;
        if (key == "run.dir") return cfg.run.dir;
        if (key == "run.checkpoint_dir")
          return cfg.run.checkpoint_dir.empty() ? (fs::path(cfg.run.dir) / "ckpt").string() : cfg.run.checkpoint_dir;
        return config;  // --config
      },
      cfg.run.overwrite);
}

void check_sample_files(const SampleOptions& opt) {
  // A latent model's --out x.h5 is its raw samples alone (no grid): a .h5 --out names no PNG.
  const bool grid = fs::path(opt.out).extension() != ".h5";
  check_bound("sample", [&](const FileDecl& d) -> std::string {
    if (is(d, "--weights")) return opt.weights;
    if (std::string(d.option) == "--run") return opt.run_dir;
    if (is(d, "--out")) return grid ? opt.out : "";
    return opt.out;  // its raw samples
  });
}

void check_evaluate_files(const EvaluateOptions& opt, const EvalPaths& defaults) {
  const bool inception = !opt.inception.empty() || !opt.reference_stats.empty();
  const bool judged = !opt.sample.run_dir.empty() || !opt.sample.weights.empty() || !opt.samples_file.empty();
  check_bound("evaluate", [&](const FileDecl& d) -> std::string {
    const std::string o = d.option;
    if (o == "--run") return is(d, "--run", "dir:eval.json") && !opt.json.empty() ? "" : opt.sample.run_dir;
    if (o == "--weights") return opt.sample.weights;
    if (o == "--samples") return opt.samples_file;
    if (o == "--config") return opt.config;
    if (o == "--inception") return opt.inception;
    if (o == "--reference-stats") return opt.reference_stats;
    if (o == "--json") return opt.json;
    if (o == "--samples-out") return opt.samples_out;
    if (inception || (!judged && !opt.train_classifier)) return "";
    if (o == "--reference") return opt.reference.empty() ? defaults.reference : opt.reference;
    if (o == "--classifier") return opt.classifier.empty() ? defaults.classifier : opt.classifier;
    if (o == "--train-data") return opt.train_data.empty() ? defaults.train_data : opt.train_data;
    return "";
  });
}

void check_prune_files(const PruneOptions& opt) {
  // Without --data, score and learned pruning read the run's data.path (or the demo's).
  std::string data = opt.data;
  if (data.empty() && opt.method != "index") {
    const fs::path config = fs::path(opt.run_dir) / "config.toml";
    const bool run_config = !opt.run_dir.empty() && fs::is_regular_file(config);
    data = (run_config ? RunConfig::from_file(config.string()) : RunConfig::demo()).data.path;
  }
  check_bound("prune", [&](const FileDecl& d) -> std::string {
    const std::string o = d.option;
    if (o == "--run") return opt.run_dir;
    if (o == "--weights") return opt.weights;
    if (o == "--data") return data;
    return opt.out;
  });
}

void check_plan_files(const std::string& config, const std::string& calibration, const std::string& json) {
  check_bound("plan", [&](const FileDecl& d) -> std::string {
    const std::string o = d.option;
    return o == "--config" ? config : o == "--calibration" ? calibration : json;
  });
}

void check_prepare_files(const std::string& src, const std::string& features, const std::string& labels,
                         const std::string& out) {
  check_bound("prepare-data", [&](const FileDecl& d) -> std::string {
    const std::string o = d.option;
    return o == "@dir" ? src : o == "--features" ? features : o == "--labels" ? labels : out;
  });
}

void check_single_input(const std::string& command, const std::string& path) {
  check_bound(command.c_str(), [&](const FileDecl&) { return path; });
}

}  // namespace dit
