// The declarations of every subcommand's files and the one check that binds them (see command_files.h). An option
// spelled "@name" is positional; one without "--" is a config key set with --set KEY="PATH".
#include "io/command_files.h"

#include <functional>

#include "core/error.h"

namespace dit {

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
      {"data.vae", In, K::Safetensors, "the VAE that decodes the sample grids", "", "data.vae"},
      {"data.vae_config", In, K::Json, "the VAE's config.json (given, or found beside data.vae)", "", "data.vae_config"},
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
      {"--run-dir", Out, K::Json, "each rank's step split and memory", "dir:ranks.jsonl", "run.dir"},
      {"--run-dir", Out, K::Json, "the profile's timeline", "dir:trace.json", "run.dir"},
      {"--run-dir", Out, K::Json, "the layout tuning's record", "dir:tune.json", "run.dir"},
      {"--run-dir", Out, K::Json, "the evaluation's result", "dir:eval.json", "run.dir"},
      {"--run-dir", Out, K::Text, "the plots' log", "dir:plots.log", "run.dir"},
      {"--checkpoint-dir", Out, K::CheckpointRoot, "the checkpoints", "", "run.checkpoint_dir"},
      // Found or made on their own: the locks beside the run folder and a checkpoint folder given apart.
      {"--run-dir", Out, K::Lock, "the run folder's lock", "beside:.lock", "run.dir"},
      {"--checkpoint-dir", Out, K::Lock, "the checkpoint folder's lock", "beside:.lock", "run.checkpoint_dir"}}},
    {"sample",
     {{"--weights", In, K::Weights, "the weights being sampled"},
      {"--run", In, K::Weights, "the weights being sampled", "dir:ema.h5"},
      {"--run", In, K::Config, "the run's sampler settings", "dir:config.toml"},
      {"--vae", In, K::Safetensors, "the VAE that decodes the latents"},
      {"--vae-config", In, K::Json, "the VAE's config.json (given, or found beside --vae)"},
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
      {"--vae", In, K::Safetensors, "the VAE that decodes the samples"},
      {"--vae-config", In, K::Json, "the VAE's config.json (given, or found beside --vae)"},
      {"--json", Out, K::Json, "the result"},
      {"--run", Out, K::Json, "the result", "dir:eval.json"},
      {"--samples-out", Out, K::RawSamples, "the drawn samples"}}},
    {"verify", {{"--golden", In, K::Golden, "the golden numbers"}}},
    {"prepare-data",
     {{"@dir", In, K::Folder, "the source images"},
      {"--features", In, K::Folder, "the latent features"},
      {"--labels", In, K::Folder, "the labels"},
      {"--vae", In, K::Safetensors, "the VAE that encodes the images"},
      {"--vae-config", In, K::Json, "the VAE's config.json (given, or found beside --vae)"},
      {"--out", Out, K::Dataset, "the dataset written"},
      {"--out", Out, K::Lock, "the preparation's lock", "beside:.lock"},
      {"--out", Out, K::WorkFolder, "the work folder of a resumable preparation (--vae)", "beside:.parts"}}},
    {"inspect", {{"@checkpoint", In, K::CheckpointOrSafetensors, "the checkpoint or VAE inspected"}}},
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
    {"report",
     {{"@run", In, K::RunFolder, "the run reported"},
      {"@run", In, K::RunConfig, "the run's config record", "dir:config.toml"},
      {"@run", In, K::Json, "the metrics", "dir:metrics.jsonl"},
      {"@run", In, K::Json, "the accounting", "dir:accounting.json"},
      {"@run", In, K::Json, "each rank's step split and memory", "dir:ranks.jsonl"},
      {"@run", In, K::Json, "the timeline", "dir:trace.json"},
      {"@run", In, K::Json, "the evaluation's result", "dir:eval.json"},
      {"@run", In, K::Png, "the last sample grid", "dir:samples.png"},
      {"--out", Out, K::Report, "the report"},
      {"@run", Out, K::Report, "the report", "dir:report.html"}}},
};

bool g_files_check_only = false;

}  // namespace

bool declares(const FileDecl& d, const char* option, const char* derive) {
  return std::string(d.option) == option && std::string(d.derive) == derive;
}

void check_command_files(const char* command, const std::function<std::string(const FileDecl&)>& path_of,
                         RunFolderUse run_folder, ForeignPicture pictures) {
  FilePlan plan(command);
  plan.bind(files_of(command), path_of);
  if (run_folder == RunFolderUse::Replaced) plan.replace_whole(FileKind::RunFolder);
  if (pictures == ForeignPicture::Replaced) plan.overwrite();
  plan.check();
  if (g_files_check_only) throw Error(kFilesPassed);
}

void set_files_check_only(bool on) { g_files_check_only = on; }

const std::vector<CommandFiles>& command_files() { return kCommands; }

const std::vector<FileDecl>& files_of(const std::string& command) {
  for (const CommandFiles& c : kCommands)
    if (command == c.command) return c.files;
  DIT_FAIL("files_of: no declaration of the files of '", command, "'");
}

void check_single_input(const std::string& command, const std::string& path) {
  check_command_files(command.c_str(), [&](const FileDecl&) { return path; });
}

}  // namespace dit
