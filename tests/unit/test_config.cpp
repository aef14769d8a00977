// The run configuration: the demo and the shipped TOML files, the to_toml round trip, presets,
// --set, and every class of error, each checked for a message that names the offending key.
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "engine/dit_pipeline.h"
#include "core/error.h"
#include "io/config.h"

namespace dit {
namespace {

const std::string kConfigs = std::string(DIT_TEST_DATA) + "/../../configs";

// The message of the dit::Error that `f` throws; fails the test when it throws nothing.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a dit::Error";
  return "";
}

std::string parse_error(const std::string& text) {
  return error_of([&] { RunConfig::from_toml(text, "case.toml"); });
}

#define EXPECT_HAS(msg, part) EXPECT_NE((msg).find(part), std::string::npos) << "message: " << (msg)

TEST(Config, DemoValidates) {
  const RunConfig c = RunConfig::demo();
  EXPECT_NO_THROW(c.validate());
  EXPECT_EQ(c.model.dit.depth, 4);
  EXPECT_EQ(c.model.dit.in_channels, 1);
  EXPECT_EQ(c.parallel.tp * c.parallel.pp, 8);
  EXPECT_EQ(c.data.prepare, "fashion-mnist");
  EXPECT_NE(c, RunConfig{});  // the demo is not just the struct defaults
}

TEST(Config, EmptyFileGivesStructDefaults) {
  EXPECT_EQ(RunConfig::from_toml("", "empty.toml"), RunConfig{});
  EXPECT_EQ(RunConfig::from_toml("[train]\n", "empty.toml"), RunConfig{});
}

TEST(Config, DemoFileEqualsDemo) {
  const RunConfig file = RunConfig::from_file(kConfigs + "/fashion_mnist.toml");
  const RunConfig demo = RunConfig::demo();
  EXPECT_EQ(file, demo) << "configs/fashion_mnist.toml:\n"
                        << file.to_toml() << "\ndemo():\n"
                        << demo.to_toml();
}

// The DDPM baseline file is the demo with the official DiT's recipe and block, nothing else changed.
TEST(Config, DdpmDemoFileIsTheDemoWithTheOfficialRecipe) {
  const RunConfig file = RunConfig::from_file(kConfigs + "/fashion_mnist_ddpm.toml");
  RunConfig want = RunConfig::demo();
  const RunConfig defaults;
  want.diffusion = defaults.diffusion;  // DDPM, uniform timesteps, no cosine term, no weighting
  want.model.dit.learn_sigma = true;
  want.model.dit.mlp = defaults.model.dit.mlp;
  want.model.dit.norm = defaults.model.dit.norm;
  want.model.dit.pos_embed = defaults.model.dit.pos_embed;
  want.sample.sampler = diffusion::SamplerKind::Ddim;
  want.train.lr = 1.5e-3;  // the official recipe's tuned rate (docs/demo.md: 3e-3 learns no better there)
  want.run.dir = "runs/fashion_mnist_ddpm";
  EXPECT_EQ(file, want) << "configs/fashion_mnist_ddpm.toml:\n" << file.to_toml() << "\nwant:\n" << want.to_toml();
  EXPECT_NO_THROW(file.validate());
}

TEST(Config, ImageNetFileIsTheOfficialXL2) {
  const RunConfig c = RunConfig::from_file(kConfigs + "/imagenet_latents_xl2.toml");
  EXPECT_EQ(c.model.preset, "DiT-XL/2");
  EXPECT_EQ(c.model.dit.depth, 28);
  EXPECT_EQ(c.model.dit.hidden_size, 1152);
  EXPECT_EQ(c.model.dit.num_heads, 16);
  EXPECT_EQ(c.model.dit.patch_size, 2);
  EXPECT_EQ(c.model.dit.input_size, 32);
  EXPECT_EQ(c.model.dit.in_channels, 4);
  EXPECT_EQ(c.model.dit.num_classes, 1000);
  EXPECT_EQ(c.train.global_batch, 256);
  EXPECT_EQ(c.train.lr, 1e-4);
  EXPECT_EQ(c.train.weight_decay, 0.0);
  EXPECT_EQ(c.train.grad_clip, 0.0);
  EXPECT_EQ(c.train.ema_decay, 0.9999);
  EXPECT_EQ(c.train.steps, 400000);
  EXPECT_EQ(c.train.backend, BackendKind::Cuda);
  EXPECT_EQ(c.train.precision, DType::BF16);
  EXPECT_EQ(c.data.path, "data/imagenet256_latents.h5");
  EXPECT_EQ(c.data.prepare, "none");
}

// A config in which every field differs from its default, so a key that to_toml() forgot to
// write would come back as the default and break the equality.
RunConfig unusual_config() {
  RunConfig c;
  c.model.preset = "DiT-B/4";
  DiTConfig& m = c.model.dit;
  m.input_size = 24, m.patch_size = 3, m.in_channels = 2, m.hidden_size = 96, m.depth = 6;
  m.num_heads = 3, m.mlp_ratio = 2.5, m.num_classes = 7, m.learn_sigma = false;
  m.class_dropout_prob = 0.15, m.frequency_embedding_size = 128, m.layernorm_eps = 1e-5;
  c.diffusion.steps = 500;
  TrainSection& t = c.train;
  t.global_batch = 96, t.micro_batch = 12, t.steps = 777, t.lr = 3.3e-4, t.warmup = 17;
  t.lr_schedule = LrSchedule::Cosine, t.min_lr = 1.1e-5, t.weight_decay = 0.05, t.beta1 = 0.85;
  t.beta2 = 0.95, t.eps = 1e-7, t.grad_clip = 0.5, t.ema_decay = 0.99, t.ema_warmup = false;
  t.seed = 1234567890123ull, t.log_every = 3, t.sample_every = 100, t.peak_tflops = 1.0 / 3;
  t.precision = DType::BF16, t.backend = BackendKind::Cuda;
  c.parallel.tp = 3, c.parallel.pp = 2, c.parallel.schedule = ScheduleKind::GPipe;
  c.parallel.pp_layers = {4, 2};
  c.data.path = "some dir/with \"quotes\" and \\ back.h5", c.data.prepare = "none";
  c.data.latent_scale = 0.5;
  c.sample.num_steps = 25, c.sample.sampler = diffusion::SamplerKind::Ddpm, c.sample.cfg_scale = 1.5;
  c.sample.per_class = 2, c.sample.classes = {6, 0, 3}, c.sample.cfg_official = true;
  c.sample.cfg_t_min = 0.125, c.sample.cfg_t_max = 0.625, c.sample.seed = 99;
  c.sample.clip_denoised = ClipSetting::No;
  c.run.dir = "out/unusual", c.run.overwrite = true;
  return c;
}

TEST(Config, ToTomlRoundTripsEveryField) {
  const RunConfig c = unusual_config();
  ASSERT_NO_THROW(c.validate());
  // Every section really differs from the defaults (else the round trip proves little).
  const RunConfig d;
  EXPECT_NE(c.model, d.model);
  EXPECT_NE(c.diffusion, d.diffusion);
  EXPECT_NE(c.train, d.train);
  EXPECT_NE(c.parallel, d.parallel);
  EXPECT_NE(c.data, d.data);
  EXPECT_NE(c.sample, d.sample);
  EXPECT_NE(c.run, d.run);
  const std::string text = c.to_toml();
  const RunConfig back = RunConfig::from_toml(text, "roundtrip.toml");
  EXPECT_EQ(back, c) << text;
  EXPECT_EQ(back.to_toml(), text);
  EXPECT_EQ(RunConfig::from_toml(RunConfig::demo().to_toml(), "demo"), RunConfig::demo());
  EXPECT_EQ(RunConfig::from_toml(d.to_toml(), "defaults"), d);
  for (const char* key : {"[model]", "[diffusion]", "[train]", "[parallel]", "[data]",
                          "[sample]", "[run]", "layernorm_eps = ", "pp_layers = [4, 2]",
                          "classes = [6, 0, 3]", "seed = 1234567890123", "eps = 1e-7\n"})
    EXPECT_HAS(text, key);
}

TEST(Config, PresetSetsSizesAndExplicitKeysOverride) {
  RunConfig c = RunConfig::from_toml("[model]\npreset = \"DiT-S/4\"\n", "p.toml");
  EXPECT_EQ(c.model.dit.depth, 12);
  EXPECT_EQ(c.model.dit.hidden_size, 384);
  EXPECT_EQ(c.model.dit.num_heads, 6);
  EXPECT_EQ(c.model.dit.patch_size, 4);
  // The explicit key wins whatever its position in the table.
  for (const char* text : {"[model]\ndepth = 3\npreset = \"DiT-S/4\"\n",
                           "[model]\npreset = \"DiT-S/4\"\ndepth = 3\n"}) {
    c = RunConfig::from_toml(text, "p.toml");
    EXPECT_EQ(c.model.dit.depth, 3) << text;
    EXPECT_EQ(c.model.dit.hidden_size, 384) << text;
  }
  // --set of a preset replaces the four sizes; a later --set overrides one of them.
  c = RunConfig::demo();
  c.set("model.preset=DiT-B/2");
  EXPECT_EQ(c.model.dit.depth, 12);
  EXPECT_EQ(c.model.dit.hidden_size, 768);
  EXPECT_EQ(c.model.dit.patch_size, 2);
  EXPECT_EQ(c.model.dit.in_channels, 1);  // not a preset's business
  c.set("model.depth=8");
  EXPECT_EQ(c.model.dit.depth, 8);
  const std::string msg = parse_error("[model]\npreset = \"DiT-M/3\"\n");
  EXPECT_HAS(msg, "model.preset");
  EXPECT_HAS(msg, "DiT-M/3");
  EXPECT_HAS(msg, "DiT-XL/2");
}

TEST(Config, UnknownKeyNamesFullKeyAndClosest) {
  std::string msg = parse_error("[train]\nlrr = 1e-3\n");
  EXPECT_HAS(msg, "case.toml");
  EXPECT_HAS(msg, "unknown key train.lrr");
  EXPECT_HAS(msg, "did you mean train.lr?");
  EXPECT_HAS(msg, "global_batch");  // the known keys of [train] are listed
  msg = parse_error("[train]\ntp = 2\n");  // the right key in the wrong section
  EXPECT_HAS(msg, "train.tp");
  EXPECT_HAS(msg, "did you mean parallel.tp?");
  msg = parse_error("lr = 1\n");  // above every section header
  EXPECT_HAS(msg, "'lr' is outside any section");
  EXPECT_HAS(msg, "train.lr");
  msg = parse_error("[train]\nzzzzzzzz = 1\n");  // nothing close: no guess
  EXPECT_HAS(msg, "train.zzzzzzzz");
  EXPECT_EQ(msg.find("did you mean"), std::string::npos) << msg;
}

TEST(Config, UnknownSectionNamesItAndTheClosest) {
  std::string msg = parse_error("[trian]\nlr = 1e-3\n");
  EXPECT_HAS(msg, "unknown section [trian]");
  EXPECT_HAS(msg, "did you mean [train]?");
  EXPECT_HAS(msg, "parallel");
  msg = parse_error("train = 3\n");
  EXPECT_HAS(msg, "train must be a section [train]");
}

TEST(Config, WrongTypesNameKeyExpectedAndGiven) {
  std::string msg = parse_error("[train]\nsteps = \"ten\"\n");
  EXPECT_HAS(msg, "train.steps: expected an integer, got a string (\"ten\")");
  msg = parse_error("[train]\nsteps = 1.5\n");
  EXPECT_HAS(msg, "train.steps: expected an integer, got a float (1.5)");
  msg = parse_error("[train]\nema_warmup = 1\n");
  EXPECT_HAS(msg, "train.ema_warmup: expected a boolean");
  msg = parse_error("[run]\ndir = 5\n");
  EXPECT_HAS(msg, "run.dir: expected a string, got an integer (5)");
  msg = parse_error("[parallel]\npp_layers = [1, \"a\"]\n");
  EXPECT_HAS(msg, "parallel.pp_layers[1]: expected an integer");
  msg = parse_error("[sample]\nclasses = 3\n");
  EXPECT_HAS(msg, "sample.classes: expected an array of integers");
  msg = parse_error("[train]\nlog_every = 10000000000\n");
  EXPECT_HAS(msg, "train.log_every = 10000000000: expected an integer in [");
  msg = parse_error("[train]\nseed = -1\n");
  EXPECT_HAS(msg, "train.seed = -1");
  msg = parse_error("[train]\nlr = inf\n");
  EXPECT_HAS(msg, "train.lr = inf: expected a finite number");
  msg = parse_error("[sample]\nclip_denoised = 0\n");
  EXPECT_HAS(msg, "sample.clip_denoised: expected one of auto, true, false, got an integer (0)");
  msg = parse_error("[sample]\nclip_denoised = \"yes\"\n");
  EXPECT_HAS(msg, "sample.clip_denoised = \"yes\": expected one of auto, true, false");
  // sample.clip_denoised takes TOML's booleans and its names alike.
  EXPECT_EQ(RunConfig::from_toml("[sample]\nclip_denoised = false\n", "b.toml").sample.clip_denoised, ClipSetting::No);
  EXPECT_EQ(RunConfig::from_toml("[sample]\nclip_denoised = true\n", "b.toml").sample.clip_denoised, ClipSetting::Yes);
  EXPECT_EQ(RunConfig::from_toml("[sample]\nclip_denoised = \"false\"\n", "b.toml").sample.clip_denoised,
            ClipSetting::No);
  EXPECT_EQ(RunConfig{}.sample.clip_denoised, ClipSetting::Auto);
  // Integers are accepted where floats are expected.
  const RunConfig c = RunConfig::from_toml("[train]\nlr = 1\ngrad_clip = 0\n", "ok.toml");
  EXPECT_EQ(c.train.lr, 1.0);
  EXPECT_EQ(c.train.grad_clip, 0.0);
}

TEST(Config, OutOfRangeValuesNameTheirKeyAndTheAllowedValues) {
  struct Case {
    const char* text;
    std::vector<const char*> parts;
  };
  const std::vector<Case> cases = {
      {"[train]\nglobal_batch = 0", {"train.global_batch = 0", ">= 1"}},
      {"[train]\nglobal_batch = 8\nmicro_batch = 16",
       {"train.micro_batch = 16", "<= train.global_batch = 8"}},
      {"[train]\nsteps = 0", {"train.steps = 0", ">= 1"}},
      {"[train]\nlr = 0", {"train.lr = 0", "> 0"}},
      {"[train]\nbeta1 = 1.0", {"train.beta1 = 1", "[0, 1)"}},
      {"[train]\nbeta2 = -0.1", {"train.beta2 = -0.1", "[0, 1)"}},
      {"[train]\neps = 0", {"train.eps = 0", "> 0"}},
      {"[train]\ngrad_clip = -1", {"train.grad_clip = -1", ">= 0"}},
      {"[train]\nema_decay = 1", {"train.ema_decay = 1", "[0, 1)"}},
      {"[train]\nlog_every = 0", {"train.log_every = 0", ">= 1"}},
      {"[train]\nsample_every = -1", {"train.sample_every = -1", ">= 0"}},
      {"[train]\nlr_schedule = \"linear\"", {"train.lr_schedule = \"linear\"", "constant, cosine"}},
      {"[train]\nprecision = \"fp8\"", {"train.precision = \"fp8\"", "fp32, bf16, fp16"}},
      {"[train]\nbackend = \"tpu\"", {"train.backend = \"tpu\"", "cpu, cuda"}},
      {"[parallel]\nschedule = \"zb\"", {"parallel.schedule = \"zb\"", "1f1b, gpipe"}},
      {"[parallel]\nschedule = \"zb-h2\"", {"parallel.schedule = \"zb-h2\"", "1f1b, gpipe, zb-h1, zb-v"}},
      {"[parallel]\nschedule = \"zb-v\"\npp = 2", {"parallel.schedule = \"zb-v\"", "parallel.virtual_stages = 2", "not 1"}},
      {"[parallel]\nschedule = \"zb-v\"\npp = 2\nvirtual_stages = 4",
       {"parallel.schedule = \"zb-v\"", "parallel.virtual_stages = 2", "not 4"}},
      {"[parallel]\nschedule = \"zb-v\"\npp = 8\nvirtual_stages = 2",
       {"parallel.schedule = \"zb-v\"", "model.depth = 28 to be a multiple of 2 x parallel.pp = 16"}},
      {"[parallel]\nschedule = \"zb-h1\"", {"parallel.schedule = \"zb-h1\"", "when parallel.pp = 1"}},
      {"[parallel]\nschedule = \"zb-v\"\nvirtual_stages = 2", {"parallel.schedule = \"zb-v\"", "when parallel.pp = 1"}},
      {"[parallel]\nschedule = \"zb-h1\"\npp = 2\nvirtual_stages = 2",
       {"parallel.schedule = \"zb-h1\"", "\"zb-v\" or \"1f1b\" with parallel.virtual_stages = 2"}},
      {"[parallel]\ntp = 0", {"parallel.tp = 0", ">= 1"}},
      {"[parallel]\npp = 0", {"parallel.pp = 0", ">= 1"}},
      {"[parallel]\ntp = 3", {"parallel.tp = 3", "model.num_heads = 16"}},
      {"[parallel]\npp = 2\npp_layers = [28, 0]", {"parallel.pp_layers[1] = 0", ">= 1"}},
      {"[parallel]\npp = 2\npp_layers = [10, 10]",
       {"parallel.pp_layers = [10, 10]", "model.depth = 28, got 20"}},
      {"[parallel]\npp = 2\npp_layers = [28]", {"parallel.pp_layers = [28]", "parallel.pp = 2"}},
      {"[parallel]\npp = 29", {"parallel.pp = 29", "model.depth = 28"}},
      {"[sample]\nsampler = \"euler\"", {"sample.sampler = \"euler\"", "ddim or ddpm", "diffusion.objective = \"ddpm\""}},
      {"[sample]\nsampler = \"rk4\"", {"sample.sampler = \"rk4\"", "ddim, ddpm, euler, heun, euler_maruyama"}},
      {"[diffusion]\nobjective = \"edm\"", {"diffusion.objective = \"edm\"", "ddpm, flow"}},
      {"[model]\nlearn_sigma = true\n[diffusion]\nobjective = \"flow\"\n[sample]\nsampler = \"euler\"",
       {"model.learn_sigma = true", "diffusion.objective = \"flow\""}},
      {"[model]\nlearn_sigma = false\n[diffusion]\nobjective = \"flow\"",
       {"sample.sampler = \"ddim\"", "euler, heun or euler_maruyama"}},
      {"[diffusion]\nlogit_normal_std = -1", {"diffusion.logit_normal_std = -1", "> 0"}},
      {"[diffusion]\nlogit_normal_mean = nan", {"diffusion.logit_normal_mean = nan", "finite"}},
      {"[diffusion]\ntimestep_sampling = \"logit_normal\"",
       {"diffusion.timestep_sampling = \"logit_normal\"", "diffusion.objective = \"ddpm\""}},
      {"[diffusion]\ncosine_loss = true", {"diffusion.cosine_loss = true", "\"flow\""}},
      {"[model]\nlearn_sigma = false\n[diffusion]\nobjective = \"flow\"\nloss_weight = \"min_snr\"\n[sample]\n"
       "sampler = \"heun\"",
       {"diffusion.loss_weight = \"min_snr\"", "\"flow\""}},
      {"[sample]\nlast_step_size = 1.5", {"sample.last_step_size = 1.5", "(0, 1)"}},
      {"[sample]\nnum_steps = 2000", {"sample.num_steps = 2000", "[2, diffusion.steps = 1000]"}},
      {"[sample]\nnum_steps = 1", {"sample.num_steps = 1", "[2, diffusion.steps"}},
      {"[sample]\ncfg_scale = 0.5", {"sample.cfg_scale = 0.5", ">= 1"}},
      {"[sample]\nper_class = 0", {"sample.per_class = 0", ">= 1"}},
      {"[sample]\nclasses = [1, 1000]", {"sample.classes[1] = 1000", "[0, model.num_classes"}},
      {"[data]\nprepare = \"mnist\"", {"data.prepare = \"mnist\"", "fashion-mnist, none"}},
      {"[data]\nlatent_scale = 0", {"data.latent_scale = 0", "> 0"}},
      {"[diffusion]\nsteps = 0", {"diffusion.steps = 0", "[1, 100000]"}},
      {"[run]\ndir = \"\"", {"run.dir", "folder"}},
      {"[model]\nhidden_size = 100\nnum_heads = 16", {"model.hidden_size = 100", "model.num_heads"}},
  };
  for (const Case& c : cases) {
    const std::string msg = parse_error(c.text);
    EXPECT_HAS(msg, "case.toml: ");
    for (const char* part : c.parts) EXPECT_HAS(msg, part) << "\nfor:\n" << c.text;
  }
  // validate() alone, on a config built in code.
  RunConfig c = RunConfig::demo();
  c.train.micro_batch = 65;
  EXPECT_HAS(error_of([&] { c.validate(); }), "train.micro_batch = 65");
}

TEST(Config, SyntaxErrorNamesOriginAndLine) {
  const std::string msg = error_of([] { RunConfig::from_toml("[train]\nlr = = 3\n", "bad.toml"); });
  EXPECT_HAS(msg, "bad.toml: invalid TOML");
  EXPECT_HAS(msg, " 2 | lr = = 3");  // toml11 shows the line
  const std::string dup =
      error_of([] { RunConfig::from_toml("[train]\nlr = 1\nlr = 2\n", "dup.toml"); });
  EXPECT_HAS(dup, "dup.toml");
  EXPECT_HAS(dup, "already exists");
  // Invalid UTF-8 is refused before toml11 parses it (toml11 3.7 reads past its buffer on it).
  const std::string utf8 = error_of([] { RunConfig::from_toml("[run]\ndir = 'a\xcc'\n", "bin.toml"); });
  EXPECT_HAS(utf8, "bin.toml: line 2, column 9: byte 0xcc is not valid UTF-8");
  RunConfig d = RunConfig::demo();
  EXPECT_HAS(error_of([&] { d.set("run.dir='\xcc'"); }), "is not valid UTF-8");
  EXPECT_EQ(RunConfig::from_toml("[run]\ndir = 'caf\xc3\xa9'\n", "ok.toml").run.dir, "caf\xc3\xa9");
  const std::string missing = error_of([] { RunConfig::from_file("/nonexistent/x.toml"); });
  EXPECT_HAS(missing, "cannot open config file '/nonexistent/x.toml'");
}

// Sizes past what a model can hold are refused by range before any arithmetic on them, so the
// message names the key as given, not an overflowed product ("gives an empty MLP").
TEST(Config, HugeSizesAreRangeCheckedBeforeArithmetic) {
  struct Case {
    const char* text;
    std::vector<const char*> parts;
  };
  const std::vector<Case> cases = {
      {"[model]\nhidden_size = 1000000000", {"model.hidden_size = 1000000000", "at most"}},
      {"[model]\ndepth = 2000000000", {"model.depth = 2000000000", "at most"}},
      {"[model]\ndepth = 2000000000\n[parallel]\npp = 2", {"model.depth = 2000000000", "at most"}},
      {"[model]\nmlp_ratio = 1e9", {"model.mlp_ratio = 1e+09", "at most"}},
      {"[model]\ninput_size = 2000000000\npatch_size = 1", {"model.input_size = 2000000000", "at most"}},
      {"[model]\nnum_classes = 2147483647", {"model.num_classes = 2147483647", "at most"}},
      {"[model]\nnum_heads = 1000000000", {"model.num_heads = 1000000000", "at most"}},
      {"[model]\nin_channels = 2000000000", {"model.in_channels = 2000000000", "at most"}},
      {"[model]\nfrequency_embedding_size = 2000000000", {"model.frequency_embedding_size", "at most"}},
      {"[model]\npatch_size = 64", {"model.patch_size = 64", "model.input_size = 32"}},
  };
  for (const Case& c : cases) {
    const std::string msg = parse_error(c.text);
    for (const char* part : c.parts) EXPECT_HAS(msg, part) << "\nfor:\n" << c.text;
    EXPECT_EQ(msg.find("pp_layers"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("empty MLP"), std::string::npos) << msg;
  }
  // The stage split itself does not overflow either (it is also reached without validate()).
  DiTConfig m;
  m.depth = 2000000000;
  const auto stages = partition_stages(m, 2, {});
  ASSERT_EQ(stages.size(), 2u);
  EXPECT_EQ(stages[0].end_block - stages[0].first_block, 1000000000);
  EXPECT_EQ(stages[1].end_block, 2000000000);
}

// A folder given as --config once read as an empty file: a run on the built-in defaults.
TEST(Config, FolderAsConfigFileIsRefused) {
  const std::string dir = ::testing::TempDir();
  const std::string msg = error_of([&] { RunConfig::from_file(dir); });
  EXPECT_HAS(msg, "config file '" + dir + "' is a directory");
}

TEST(Config, SetAppliesTomlValuesAndBareStrings) {
  RunConfig c = RunConfig::demo();
  c.set("train.lr=1e-4");
  EXPECT_EQ(c.train.lr, 1e-4);
  c.set(" train.steps = 20 ");
  EXPECT_EQ(c.train.steps, 20);
  c.set("train.ema_warmup=false");
  EXPECT_FALSE(c.train.ema_warmup);
  c.set("parallel.pp_layers=[1, 3]");
  EXPECT_EQ(c.parallel.pp_layers, (std::vector<int>{1, 3}));
  c.set("run.dir=out/x");  // not TOML: taken as a bare string
  EXPECT_EQ(c.run.dir, "out/x");
  c.set("run.dir=\"quoted dir\"");
  EXPECT_EQ(c.run.dir, "quoted dir");
  c.set("run.dir=2024");  // a string key takes the text even when it reads as a number
  EXPECT_EQ(c.run.dir, "2024");
  c.set("train.lr_schedule=cosine");
  EXPECT_EQ(c.train.lr_schedule, LrSchedule::Cosine);
  c.set("model.preset=");
  EXPECT_EQ(c.model.preset, "");
}

TEST(Config, SetErrorsNameTheAssignment) {
  RunConfig c = RunConfig::demo();
  std::string msg = error_of([&] { c.set("train.lr"); });
  EXPECT_HAS(msg, "--set train.lr");
  EXPECT_HAS(msg, "section.key=value");
  msg = error_of([&] { c.set("lr=1"); });
  EXPECT_HAS(msg, "'lr' must be section.key");
  msg = error_of([&] { c.set("train.lrr=1"); });
  EXPECT_HAS(msg, "unknown key train.lrr; did you mean train.lr?");
  msg = error_of([&] { c.set("trian.lr=1"); });
  EXPECT_HAS(msg, "unknown section [trian]");
  msg = error_of([&] { c.set("train.steps=ten"); });  // a bare string, then the type check
  EXPECT_HAS(msg, "train.steps: expected an integer, got a string (\"ten\")");
  msg = error_of([&] { c.set("train.steps=1.5"); });
  EXPECT_HAS(msg, "train.steps: expected an integer, got a float (1.5)");
  EXPECT_EQ(c.train.steps, RunConfig::demo().train.steps);  // failed sets change nothing
}

// Numbers past 64 bits or a double's range are refused showing the value given, not clamped
// (toml11 reads 99999999999999999999999 as 2^63 - 1 and 1e400 as the largest double).
TEST(Config, OutOfRangeLiteralsAreRefusedNotClamped) {
  std::string msg = error_of([&] { RunConfig::from_toml("[train]\nsteps = 99999999999999999999999", "big.toml"); });
  EXPECT_HAS(msg, "train.steps = 99999999999999999999999");
  EXPECT_HAS(msg, "does not fit 64 bits");
  RunConfig c = RunConfig::demo();
  msg = error_of([&] { c.set("train.steps=99_999_999_999_999_999_999_999"); });
  EXPECT_HAS(msg, "train.steps = 99999999999999999999999");
  msg = error_of([&] { c.set("train.seed=-9223372036854775809"); });
  EXPECT_HAS(msg, "train.seed = -9223372036854775809");
  msg = error_of([&] { c.set("train.lr=1e400"); });
  EXPECT_HAS(msg, "train.lr = 1e400: expected a finite number");
  EXPECT_EQ(c.train.steps, RunConfig::demo().train.steps);
  c.set("train.steps=9223372036854775807");  // the largest that fits is a value, not an overflow
  EXPECT_EQ(c.train.steps, std::numeric_limits<std::int64_t>::max());
}

// An enum setting takes exactly its names, from the enum's own table, and writes them back.
TEST(Config, EnumSettingsTakeTheirNames) {
  RunConfig c = RunConfig::demo();
  c.set("parallel.schedule=gpipe");
  c.set("train.recompute=selective");
  c.set("train.precision=bf16");
  c.set("train.grad_reduce=bf16");
  EXPECT_EQ(c.parallel.schedule, ScheduleKind::GPipe);
  EXPECT_EQ(c.train.recompute, Recompute::Selective);
  EXPECT_EQ(c.train.precision, DType::BF16);
  EXPECT_EQ(c.train.grad_reduce, DType::BF16);
  const std::string text = c.to_toml();
  EXPECT_HAS(text, "schedule = \"gpipe\"");
  EXPECT_HAS(text, "recompute = \"selective\"");
  EXPECT_EQ(RunConfig::from_toml(text, "round trip"), c);
  std::string msg = error_of([&] { c.set("train.grad_reduce=fp16"); });  // a dtype, but not a reduction's
  EXPECT_HAS(msg, "train.grad_reduce = \"fp16\": expected one of fp32, bf16");
  msg = error_of([&] { c.set("train.precision=3"); });
  EXPECT_HAS(msg, "train.precision = \"3\": expected one of fp32, bf16, fp16");
}

}  // namespace
}  // namespace dit
