// `dit_mp evaluate` (see evaluate_cmd.h).
#include "app/evaluate_cmd.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "io/command_files.h"
#include "core/quote.h"
#include "eval/fid.h"
#include "eval/inception.h"
#include "eval/quality.h"
#include "io/sample_file.h"
#include "io/weights.h"
#include "parallel/rows.h"
#include "parallel/world.h"
#include "run/vae_decode.h"
#include "io/atomic_file.h"
#include "io/vae_weights.h"

namespace dit {

namespace fs = std::filesystem;

namespace {

// The evaluation's files by role (io/command_files.h), checked before any is read.
void check_evaluate_files(const EvaluateOptions& opt, const EvalPaths& defaults) {
  const bool inception = !opt.inception.empty() || !opt.reference_stats.empty();
  const bool judged = !opt.sample.run_dir.empty() || !opt.sample.weights.empty() || !opt.samples_file.empty();
  check_command_files("evaluate", [&](const FileDecl& d) -> std::string {
    const std::string o = d.option;
    if (o == "--run") return declares(d, "--run", "dir:eval.json") && !opt.json.empty() ? "" : opt.sample.run_dir;
    if (o == "--weights") return opt.sample.weights;
    if (o == "--samples") return opt.samples_file;
    if (o == "--config") return opt.config;
    if (o == "--inception") return opt.inception;
    if (o == "--reference-stats") return opt.reference_stats;
    if (o == "--json") return opt.json;
    if (o == "--samples-out") return opt.samples_out;
    if (o == "--vae") return opt.sample.vae;
    if (o == "--vae-config") return vae_config_path(opt.sample.vae, opt.sample.vae_config);
    if (inception || (!judged && !opt.train_classifier)) return "";
    if (o == "--reference") return opt.reference.empty() ? defaults.reference : opt.reference;
    if (o == "--classifier") return opt.classifier.empty() ? defaults.classifier : opt.classifier;
    if (o == "--train-data") return opt.train_data.empty() ? defaults.train_data : opt.train_data;
    return "";
  });
}

void write_json_file(const std::string& path, const std::string& json) {
  write_file_atomic(path, with_json_mark(json, "evaluate") + "\n", "evaluation result");
  std::printf("wrote %s\n", path.c_str());
}

// Collective: FID in Inception-V3 pool features against a .npz of reference mu/sigma, each rank
// computing the features of its share of the pictures (`mine`, each (c, h, w) in [-1, 1]); the
// result as JSON on rank 0. Latent samples must be decoded first (--vae).
std::string inception_fid(Comm& world, const EvaluateOptions& opt, const eval::ImageSet& shape, const Rows& mine) {
  eval::Features f;
  collective_check([&] {
    DIT_CHECK(shape.c == 1 || shape.c == 3, "--inception: samples have ", shape.c,
              " channels; Inception takes pictures (1 or 3 channels): decode latent samples with --vae first");
    if (mine.n > 0)  // on the rank's own device (--backend)
      f = eval::inception_features(opt.inception, mine.values, int(mine.n), shape.c, shape.h, shape.w,
                                   opt.sample.backend);
  });
  // The features are float values (the network's output), so they travel as floats exactly; rank
  // order is the samples' order.
  const Rows gathered = gather_rows(world, {mine.n, eval::kInceptionFeatures, {f.data.begin(), f.data.end()}});
  eval::Features all;
  all.f = eval::kInceptionFeatures;
  all.n = gathered.n;
  all.data.assign(gathered.values.begin(), gathered.values.end());
  std::string result;
  collective_check([&] {
    if (world_rank() != 0) return;
    const double fid = eval::frechet_distance(eval::fit_gaussian(all), eval::load_reference_npz(opt.reference_stats));
    std::printf("FID %.4f in Inception-V3 pool features (%d-d) of %lld samples against %s\n", fid,
                eval::kInceptionFeatures, static_cast<long long>(all.n), opt.reference_stats.c_str());
    char b[128];
    std::snprintf(b, sizeof b, "{\"feature_space\": \"inception-v3\", \"n\": %lld, \"fid\": %.8g, ",
                  static_cast<long long>(all.n), fid);
    result = std::string(b) + "\"reference_stats\": " + quote_string(opt.reference_stats) + "}";
  });
  return result;
}

// Enough samples to measure, known before any is drawn.
void check_sample_count(const SampleOptions& opt) {
  const SampleSection s = check_sample_request(opt);  // and the rest that sampling checks
  const std::string weights = opt.weights.empty() ? (fs::path(opt.run_dir) / "ema.h5").string() : opt.weights;
  const std::int64_t classes =
      s.classes.empty() ? read_weights_config(weights).num_classes : std::int64_t(s.classes.size());
  const std::int64_t n = std::int64_t(s.per_class) * classes;
  DIT_CHECK(n >= eval::kMinEvalSamples, "evaluate: --per-class ", s.per_class, " x ", classes, " classes = ", n,
            " samples; at least ", eval::kMinEvalSamples, " are needed (precision and recall use each sample's ",
            eval::kNearestNeighbour, "rd nearest neighbour)");
}

// The files an evaluation reads, checked, with the classifier trained when it is missing (rank 0).
EvalPaths resolve_evaluation(const EvaluateOptions& opt, bool from_weights, bool inception) {
  RunConfig cfg = RunConfig::demo();
  DIT_CHECK(int(from_weights) + int(!opt.samples_file.empty()) <= 1 &&
                (from_weights || !opt.samples_file.empty() || opt.train_classifier),
            "evaluate: give one of --run DIR, --weights FILE or --samples FILE (or only --train-classifier)");
  DIT_CHECK(opt.sample.run_dir.empty() || opt.sample.weights.empty(), "evaluate: give --run or --weights, not both");
  DIT_CHECK(!inception || (!opt.inception.empty() && !opt.reference_stats.empty()),
            "evaluate: --inception FILE.h5 and --reference-stats FILE.npz go together");
  std::string config = opt.config;
  if (config.empty() && !opt.sample.run_dir.empty()) {
    config = (fs::path(opt.sample.run_dir) / "config.toml").string();
    DIT_CHECK(fs::exists(config), "--run ", opt.sample.run_dir,  // a FIFO there: the reader names it
              ": not a run folder (expected config.toml and ema.h5 in it)");
  }
  if (!config.empty()) cfg = RunConfig::from_file(config);
  EvalPaths paths = eval_paths(cfg);
  check_evaluate_files(opt, paths);  // no output over an input, each file of its kind, before any is read
  if (from_weights) check_sample_count(opt.sample);  // before the classifier is trained
  if (!opt.json.empty()) check_writable_target(opt.json, "--json");
  if (!opt.samples_out.empty()) check_writable_target(opt.samples_out, "--samples-out");
  if (!opt.reference.empty()) paths.reference = opt.reference;
  if (!opt.classifier.empty()) paths.classifier = opt.classifier;
  if (!opt.train_data.empty()) paths.train_data = opt.train_data;
  if (inception) {
    DIT_CHECK(fs::is_regular_file(opt.inception), "--inception ", opt.inception, ": no such file");
    DIT_CHECK(fs::is_regular_file(opt.reference_stats), "--reference-stats ", opt.reference_stats, ": no such file");
    return paths;
  }
  if (world_rank() != 0) return paths;
  DIT_CHECK(opt.classifier_epochs >= 1 && opt.classifier_epochs <= 1000, "--classifier-epochs ",
            opt.classifier_epochs, ": expected 1 to 1000");
  eval::ClassifierTraining how;
  how.epochs = opt.classifier_epochs;
  // --train-classifier replaces the file only once the new classifier is saved.
  prepare_evaluation(paths, opt.reference.empty() && opt.train_data.empty() ? cfg.data.prepare : "none", how,
                     opt.train_classifier ? ClassifierFile::Retrain : ClassifierFile::KeepExisting);
  return paths;
}

// Rank 0: the samples of --samples, or the drawn ones kept in --samples-out (what was drawn:
// latents for a latent model).
void take_samples(const EvaluateOptions& opt, eval::ImageSet& images) {
  if (!opt.samples_file.empty()) {
    SamplesFile f = read_samples_h5(opt.samples_file);
    images.n = std::int64_t(f.labels.size());
    images.c = f.channels, images.h = f.height, images.w = f.width;
    images.pixels = std::move(f.samples);
    images.labels = std::move(f.labels);
  } else if (!opt.samples_out.empty()) {
    write_samples_h5(opt.samples_out, images.pixels, images.labels, images.c, images.h, images.w);
  }
}

// Collective: rank 0's samples dealt out over the ranks, decoded to pictures by the VAE (--vae)
// where they are latents; returns this rank's pictures, and `images` gets their shape on every rank.
// `decoder` gets the VAE's one-line description (empty without --vae).
Rows pictures_share(Comm& world, const EvaluateOptions& opt, eval::ImageSet& images, std::string& decoder) {
  const std::vector<std::int64_t> dims = broadcast_values(world, {images.n, images.c, images.h, images.w});
  images.n = dims[0];
  images.c = int(dims[1]), images.h = int(dims[2]), images.w = int(dims[3]);
  Rows rows{images.n, images.image_size(), std::move(images.pixels)};
  images.pixels.clear();
  if (opt.sample.vae.empty()) return scatter_rows(world, rows);
  VaeFile vae;
  collective_check([&] {
    vae = open_vae(opt.sample.vae, opt.sample.vae_config);
    check_vae_fits(vae, images.c, "--vae");
    if (world_rank() == 0)
      std::printf("decoding %lld latents with %s over %d ranks\n", static_cast<long long>(images.n),
                  vae.describe().c_str(), world_size());
  });
  decoder = opt.sample.vae + " (" + vae.describe() + ")";
  Rows mine = decode_share(world, vae, opt.sample.backend, rows, images.h, images.w);
  images.c = vae.config.out_channels;
  images.h *= int(vae.config.downsampling());
  images.w *= int(vae.config.downsampling());
  return mine;
}

// Rank 0: the pictures judged in the classifier's feature space against the reference set.
std::string judge_samples(const EvalPaths& paths, const eval::ImageSet& images) {
  const QualityJudge judge(paths);
  const QualityReport r = judge.judge(images);
  std::printf("%s", quality_table(r).c_str());
  return quality_json(r);
}

}  // namespace

int run_evaluate(const EvaluateOptions& given) {
  EvaluateOptions opt = given;
  collective_check([&] { opt.sample = with_run_vae(given.sample); });
  const bool from_weights = !opt.sample.run_dir.empty() || !opt.sample.weights.empty();
  const bool inception = !opt.inception.empty() || !opt.reference_stats.empty();
  EvalPaths paths;
  collective_check([&] { paths = resolve_evaluation(opt, from_weights, inception); });
  if (!from_weights && opt.samples_file.empty()) return 0;  // --train-classifier alone
  eval::ImageSet images;
  if (from_weights) {
    SampledImages s = sample_from_weights(opt.sample);
    images.n = std::int64_t(s.labels.size());
    images.c = s.model.in_channels, images.h = s.model.input_size, images.w = s.model.input_size;
    images.pixels = std::move(s.samples);
    images.labels = std::move(s.labels);
  }
  collective_check([&] {
    if (world_rank() == 0) take_samples(opt, images);
  });
  // Decoding and Inception's features run on every rank, each on its share; the classifier on rank 0.
  std::string result, decoder;
  if (inception || !opt.sample.vae.empty()) {
    const std::unique_ptr<Comm> world = watched_world();
    const Rows mine = pictures_share(*world, opt, images, decoder);
    if (inception)
      result = inception_fid(*world, opt, images, mine);
    else
      images.pixels = gather_rows(*world, mine).values;
  }
  collective_check([&] {
    if (world_rank() != 0) return;
    if (!inception) result = judge_samples(paths, images);
    if (!decoder.empty()) result.insert(1, "\"decoded_by\": " + quote_string(decoder) + ", ");  // the pictures' VAE
    std::string json = opt.json;
    if (json.empty() && !opt.sample.run_dir.empty()) json = (fs::path(opt.sample.run_dir) / "eval.json").string();
    if (!json.empty()) write_json_file(json, result);
  });
  return 0;
}

std::function<int()> add_evaluate_command(CLI::App& app) {
  auto opt = std::make_shared<EvaluateOptions>();
  EvaluateOptions& e = *opt;
  CLI::App* cmd = app.add_subcommand(
      "evaluate", "Sample quality: FID, precision/recall and class accuracy in a classifier's feature space against "
                  "a labelled reference set, with the real-data floor (samples drawn from weights, or a samples file)");
  cmd->add_option("--run", e.sample.run_dir, "A training run folder (its ema.h5 and config.toml)");
  cmd->add_option("--weights", e.sample.weights, "A weights HDF5 file");
  cmd->add_option("--samples", e.samples_file, "A samples HDF5 file (samples, labels), e.g. from dit_mp sample");
  cmd->add_option("--config", e.config, "Config naming data.path and [eval] (default: the run's, else the demo's)");
  cmd->add_option("--reference", e.reference, "Reference dataset HDF5 (default: <data.path>_test.h5)");
  cmd->add_option("--classifier", e.classifier,
                  "Classifier HDF5 (default: <data.path>_classifier.h5, trained when missing)");
  cmd->add_option("--train-data", e.train_data, "Training dataset for the floor and the classifier (default: data.path)");
  cmd->add_flag("--train-classifier", e.train_classifier, "Train the classifier (again) before evaluating");
  cmd->add_option("--classifier-epochs", e.classifier_epochs, "Epochs when training the classifier")
      ->capture_default_str();
  cmd->add_option("--json", e.json, "Write the result as JSON (default with --run: <run>/eval.json)");
  cmd->add_option("--samples-out", e.samples_out, "Also write the drawn samples (HDF5)");
  cmd->add_option("--inception", e.inception,
                  "Inception-V3 FID weights (HDF5, from tools/convert_inception.py): FID in its pool features");
  cmd->add_option("--reference-stats", e.reference_stats, "With --inception: reference mu/sigma (.npz)");
  cmd->add_option("--vae", e.sample.vae, "A latent model's VAE (safetensors): samples are decoded before judging");
  cmd->add_option("--vae-config", e.sample.vae_config, "The VAE's config.json (default: beside --vae)");
  cmd->add_option("--batch", e.sample.batch, "Images sampled at once (split over data-parallel replicas)")
      ->capture_default_str();
  auto settings = add_sampler_options(cmd, e.sample, 100);
  return [cmd, opt, settings] {
    if (!*cmd) return -1;
    collective_check([&] { opt->sample.settings = settings(); });
    return run_evaluate(*opt);
  };
}

}  // namespace dit
