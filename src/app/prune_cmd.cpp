// `dit_mp prune` (see prune_cmd.h).
#include "app/prune_cmd.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "io/command_files.h"
#include "app/sample_cmd.h"
#include "engine/prune.h"
#include "io/atomic_file.h"
#include "io/config.h"
#include "io/h5_dataset.h"
#include "io/prune_text.h"
#include "io/weights.h"
#include "parallel/comm.h"
#include "parallel/world.h"
#include "run/learned_prune.h"

namespace dit {

namespace fs = std::filesystem;

namespace {

// Pruning's files by role (io/command_files.h), checked before any is read.
void check_prune_files(const PruneOptions& opt) {
  // Without --data, score and learned pruning read the run's data.path (or the demo's).
  std::string data = opt.data;
  if (data.empty() && opt.method != "index") {
    const fs::path config = fs::path(opt.run_dir) / "config.toml";
    const bool run_config = !opt.run_dir.empty() && fs::is_regular_file(config);
    data = (run_config ? RunConfig::from_file(config.string()) : RunConfig::demo()).data.path;
  }
  check_command_files("prune", [&](const FileDecl& d) -> std::string {
    const std::string o = d.option;
    if (o == "--run") return opt.run_dir;
    if (o == "--weights") return opt.weights;
    if (o == "--data") return data;
    return opt.out;
  });
}

constexpr int kMaxCalibration = 65536;

constexpr std::int64_t kMaxSteps = 100000000;
constexpr int kMaxLoraRank = 4096;
constexpr double kTauRange[2] = {1e-3, 1e3}, kScalingRange[2] = {1e-3, 1e4};

// A --set of a key the learning run sets itself, or does not use, is refused rather than ignored
// or let past the flag's own range.
void check_learning_set(const std::string& assignment) {
  std::string key = assignment.substr(0, assignment.find('='));
  key.erase(std::remove(key.begin(), key.end(), ' '), key.end());
  const char* flag = key == "train.steps" ? "--steps (1 to 100000000)"
                     : key == "train.lr"  ? "--lr (the weights'; --gate-lr the logits')"
                                          : nullptr;
  DIT_CHECK(flag == nullptr, "--set ", assignment, ": learned pruning sets ", key, " from ", flag, "; give that flag");
  DIT_CHECK(key.rfind("distill.", 0) != 0 && key.rfind("run.", 0) != 0, "--set ", assignment,
            ": learned pruning trains without a teacher or a run folder, so [distill] and [run] keys do not apply");
}

// The learning run's configuration: the teacher's model and objective on the run's recipe and
// data (the demo's without --run), at a constant learning rate, then --tp/--pp and --set.
RunConfig learning_config(const PruneOptions& opt, const DiTConfig& model, diffusion::Objective objective,
                          int diffusion_steps) {
  RunConfig cfg = RunConfig::demo();
  const fs::path config = fs::path(opt.run_dir) / "config.toml";
  if (!opt.run_dir.empty() && fs::is_regular_file(config)) cfg = RunConfig::from_file(config.string());
  if (cfg.diffusion.objective != objective) cfg.diffusion = DiffusionSection{};
  cfg.diffusion.objective = objective;
  cfg.diffusion.steps = diffusion_steps;
  cfg.model.preset.clear();
  cfg.model.dit = model;
  cfg.distill = DistillSection{};
  cfg.run = RunSection{};
  cfg.parallel.layout = LayoutMode::Fixed;
  cfg.parallel.pp_layers.clear();
  cfg.parallel.tp = opt.tp;
  cfg.parallel.pp = opt.pp;
  cfg.train.steps = opt.steps;
  cfg.train.lr = opt.lr > 0 ? opt.lr : 1e-4;  // a run's lr is positive; --lr 0 is set on the Trainer's below
  cfg.train.warmup = 0;
  cfg.train.lr_schedule = LrSchedule::Constant;
  cfg.train.eval_every = 0;
  if (!opt.data.empty()) cfg.data.path = opt.data;
  for (const std::string& s : opt.sets) {
    check_learning_set(s);
    cfg.set(s, "--set " + s);
  }
  cfg.validate();
  return cfg;
}

// "4,0.1": a flag's values as given.
std::string listed(const std::vector<double>& values) {
  std::string s;
  char buf[32];
  for (double v : values) {
    std::snprintf(buf, sizeof buf, "%g", v);
    s += (s.empty() ? "" : ",") + std::string(buf);
  }
  return s;
}

GateSettings gate_settings(const PruneOptions& opt, const DiTConfig& model, int depth) {
  GateSettings g;
  if (opt.groups.empty()) {
    g.groups = default_gate_groups(model.depth, depth);
    DIT_CHECK(!g.groups.empty(), "--method learned: depth ", depth, " does not divide the teacher's ", model.depth,
              " blocks; give --groups M:N,... (groups of M blocks keeping N, tiling the depth)");
  } else {
    g.groups = gate_groups(parse_groups_text(opt.groups, model.depth, depth, kMaxGateChoices), model.depth, depth);
  }
  // Beyond these ranges (scaling x logits + G) / tau leaves the doubles the softmax can order.
  const auto in = [](const std::vector<double>& v, double lo, double hi) {
    return v.size() == 2 && v[0] >= lo && v[0] <= hi && v[1] >= lo && v[1] <= hi;
  };
  DIT_CHECK(in(opt.tau, kTauRange[0], kTauRange[1]), "--tau ", listed(opt.tau),
            ": expected START,END, two positive temperatures in [0.001, 1000] (e.g. 4,0.1)");
  DIT_CHECK(in(opt.scaling, kScalingRange[0], kScalingRange[1]), "--scaling ", listed(opt.scaling),
            ": expected START,END, two positive logit scales in [0.001, 10000] (e.g. 100,100)");
  g.tau_start = opt.tau[0], g.tau_end = opt.tau[1];
  g.scaling_start = opt.scaling[0], g.scaling_end = opt.scaling[1];
  g.lr = opt.gate_lr > 0 ? opt.gate_lr : 10 * opt.lr;
  DIT_CHECK(g.lr > 0 && std::isfinite(g.lr), "--gate-lr ", opt.gate_lr,
            ": expected a positive learning rate of the logits (default 10 x --lr; give one when --lr is 0)");
  DIT_CHECK(opt.gate_ema >= 0 && opt.gate_ema < 1, "--gate-ema ", opt.gate_ema,
            ": expected an EMA decay in [0, 1) (0: the last logits decide)");
  g.ema_decay = opt.gate_ema;
  return g;
}

// Checks the learned method's options against the teacher (every rank): groups that tile its
// depth and keep `depth` blocks, steps, learning rates, tau and scaling, the layout and --set.
LearnedPrune resolve_learned(const PruneOptions& opt, const std::string& teacher, const DiTConfig& model,
                             diffusion::Objective objective, int diffusion_steps, int depth) {
  DIT_CHECK(opt.steps >= 1 && opt.steps <= kMaxSteps, "--steps ", opt.steps, ": expected 1 to ", kMaxSteps,
            " training steps of the gates");
  DIT_CHECK(opt.lr >= 0 && std::isfinite(opt.lr), "--lr ", opt.lr,
            ": expected a learning rate >= 0 of the weights (0: the logits alone train)");
  DIT_CHECK(opt.log_every >= 0, "--log-every ", opt.log_every, ": expected 0 (about 20 lines) or a step count");
  LearnedPrune job;
  job.teacher = teacher;
  job.cfg = learning_config(opt, model, objective, diffusion_steps);
  DIT_CHECK(fs::is_regular_file(job.cfg.data.path), "the training dataset ", job.cfg.data.path, " does not exist",
            opt.data.empty() ? ": give one with --data FILE (dit_mp prepare-data makes one)" : "");
  DIT_CHECK(opt.lora >= 0 && opt.lora <= kMaxLoraRank, "--lora ", opt.lora, ": expected a LoRA rank from 1 to ",
            kMaxLoraRank, ", or 0 for full updates of the weights");
  DIT_CHECK(opt.lora == 0 || opt.lr > 0, "--lora ", opt.lora, " needs --lr > 0 (the adapters' learning rate)");
  TrainConfig t = train_config(job.cfg);
  t.adamw.lr = opt.lora > 0 ? 0 : opt.lr;  // 0: the weights stay (AdamW with lr 0 moves nothing)
  t.lora.rank = opt.lora;
  t.lora.lr = opt.lr;
  t.gates = gate_settings(opt, model, depth);
  t.gates.beta1 = t.adamw.beta1, t.gates.beta2 = t.adamw.beta2, t.gates.eps = t.adamw.eps;
  job.setup = TrainSetup::make(job.cfg.model.dit, t, layout_for_world(job.cfg.parallel.tp, job.cfg.parallel.pp));
  job.log_every = opt.log_every > 0 ? opt.log_every : static_cast<int>(std::max<std::int64_t>(1, opt.steps / 20));
  return job;
}

// What to prune, resolved and checked on every rank.
struct PruneJob {
  std::string teacher, out, data_path;
  DiTConfig model;
  int depth = 0;
  PruneMethod method = PruneMethod::Index;
  BlockScore score = BlockScore::Cos;
  std::vector<int> keep;  // index: model order
  ScoreRecipe recipe;
  double latent_scale = 0;
  std::int64_t calibration = 0;
  std::uint64_t seed = 0;
  std::shared_ptr<Dataset> data;  // score only
  LearnedPrune learned;           // learned only
};

std::string pruned_by(const PruneJob& job) {
  if (job.method == PruneMethod::Index) return "index";
  if (job.method == PruneMethod::Learned) return "learned:" + groups_text(job.learned.setup.train.gates.groups);
  return std::string("score:") + name_of(kBlockScoreNames, job.score);
}

// The teacher's file and model, the student's depth, and --out.
void resolve_teacher(const PruneOptions& opt, PruneJob& job) {
  DIT_CHECK(opt.run_dir.empty() != opt.weights.empty(), "give exactly one of --run DIR or --weights FILE");
  check_prune_files(opt);  // no output over an input, each file of its kind, before any is read
  job.teacher = opt.run_dir.empty() ? opt.weights : (fs::path(opt.run_dir) / "ema.h5").string();
  DIT_CHECK(fs::exists(job.teacher), job.teacher, " does not exist",
            opt.run_dir.empty() ? "" : " (a run writes ema.h5 when its training finishes)");
  job.model = read_weights_config(job.teacher);
  job.recipe.diffusion_steps = read_weights_diffusion_steps(job.teacher);
  job.recipe.objective.objective = read_weights_objective(job.teacher);
  const int teacher = job.model.depth;
  DIT_CHECK(teacher >= 2, job.teacher, " holds a model of 1 block: there is no block to prune");
  DIT_CHECK(opt.depth >= 1 && opt.depth < teacher, "--depth ", opt.depth, ": expected 1 to ", teacher - 1,
            " (fewer blocks than the teacher's ", teacher, ")");
  job.depth = opt.depth;
  job.out = opt.out;
  DIT_CHECK(!job.out.empty() && !fs::is_directory(job.out), "--out ", job.out,
            " is a folder: give the pruned weights file's name, e.g. ", (fs::path(job.out) / "pruned.h5").string());
  check_writable_target(job.out, "--out");
}

// --method score: the score, the calibration batch's size and its dataset, and the recipe's loss.
void resolve_score(const PruneOptions& opt, PruneJob& job) {
  const auto score = value_of(kBlockScoreNames, opt.score);
  DIT_CHECK(score.has_value(), "--score '", opt.score, "': expected one of ", names_of(kBlockScoreNames));
  job.score = *score;
  DIT_CHECK(opt.calibration >= 1 && opt.calibration <= kMaxCalibration, "--calibration ", opt.calibration,
            ": expected 1 to ", kMaxCalibration, " images");
  job.calibration = opt.calibration;
  job.seed = opt.seed;
  RunConfig cfg;
  const fs::path config = fs::path(opt.run_dir) / "config.toml";
  if (!opt.run_dir.empty() && fs::is_regular_file(config)) cfg = RunConfig::from_file(config.string());
  // The run's loss terms, when the run trained the objective its weights say.
  if (cfg.diffusion.objective == job.recipe.objective.objective) job.recipe.objective = cfg.diffusion.train_objective();
  job.data_path = opt.data.empty() ? cfg.data.path : opt.data;
  DIT_CHECK(fs::is_regular_file(job.data_path), "the calibration dataset ", job.data_path, " does not exist",
            opt.data.empty() ? ": give one with --data FILE (dit_mp prepare-data makes one)" : "");
  job.data = open_dataset(job.data_path, cfg.data.latent_scale);
  const SampleShape s = job.data->shape();
  const DiTConfig& m = job.model;
  DIT_CHECK(s.channels == m.in_channels && s.height == m.input_size && s.width == m.input_size, job.data_path,
            " holds ", s.channels, "x", s.height, "x", s.width, " samples but the model takes ", m.in_channels, "x",
            m.input_size, "x", m.input_size);
  DIT_CHECK(job.data->num_classes() <= m.num_classes, job.data_path, " has ", job.data->num_classes(),
            " classes but the model ", m.num_classes);
}

PruneJob resolve_job(const PruneOptions& opt) {
  PruneJob job;
  resolve_teacher(opt, job);
  const auto method = value_of(kPruneMethodNames, opt.method);
  DIT_CHECK(method.has_value(), "--method '", opt.method, "': expected one of ", names_of(kPruneMethodNames));
  job.method = *method;
  DIT_CHECK(job.method == PruneMethod::Learned || !opt.learned_given, "--groups, --steps, --lr, --lora, --gate-lr, "
            "--gate-ema, --tau, --scaling, --tp, --pp, --log-every and --set apply to --method learned");
  DIT_CHECK(job.method == PruneMethod::Index || !opt.keep_given, "--keep applies to --method index; --method ",
            opt.method, " chooses the blocks itself");
  DIT_CHECK(job.method == PruneMethod::Score || !opt.score_given, "--score applies to --method score");
  if (job.method == PruneMethod::Index) {
    DIT_CHECK(opt.keep_given, "--method index needs --keep i,j,... (the ", job.depth, " teacher blocks to keep)");
    job.keep = checked_keep(parse_keep_text(opt.keep, job.model.depth, job.depth), job.model.depth, job.depth);
  } else if (job.method == PruneMethod::Score) {
    resolve_score(opt, job);
  } else {
    job.learned = resolve_learned(opt, job.teacher, job.model, job.recipe.objective.objective,
                                  job.recipe.diffusion_steps, job.depth);
  }
  return job;
}

// Scores every block on world rank 0's CPU backend and returns the blocks kept.
std::vector<int> keep_by_score(const PruneJob& job) {
  std::unique_ptr<Backend> be = make_backend("cpu");
  SelfComm tp;
  StageOptions options;
  options.recompute = Recompute::Full;  // a forward keeps only each block's output
  DiTStage teacher(*be, job.model, StageLayout::whole(job.model), tp, 1, options);
  load_weights(job.teacher, teacher.params());
  const Calibration cal = draw_calibration(*job.data, job.model, job.recipe, job.calibration, job.seed);
  const BlockScores s = score_blocks(*be, teacher, cal, job.recipe, job.score);
  if (job.score == BlockScore::Loss) std::printf("full model: loss %.6g\n", s.full_loss);
  for (int b = 0; b < job.model.depth; ++b)
    std::printf(job.score == BlockScore::Cos ? "block %2d: cos %.9f%s\n" : "block %2d: loss increase %.6g%s\n", b,
                s.score[b], b + 1 == job.model.depth ? " (the last block: kept)" : "");
  return keep_by_scores(s.score, job.depth, job.score);
}

void say_what(const PruneJob& job) {
  std::printf("prune: %s (depth %d) to depth %d by %s", job.teacher.c_str(), job.model.depth, job.depth,
              pruned_by(job).c_str());
  if (job.method == PruneMethod::Score)
    std::printf(" on %lld calibration images of %s (seed %llu)", static_cast<long long>(job.calibration),
                job.data_path.c_str(), static_cast<unsigned long long>(job.seed));
  if (job.method == PruneMethod::Learned)
    std::printf(" on %s (seed %llu)", job.learned.cfg.data.path.c_str(),
                static_cast<unsigned long long>(job.learned.cfg.train.seed));
  std::printf("\n");
  std::fflush(stdout);
}

// Writes the pruned file of the blocks `keep` (rank 0).
void write_student(const PruneJob& job, const std::vector<int>& keep) {
  std::vector<int> dropped;
  for (int b = 0, j = 0; b < job.model.depth; ++b)
    if (j < int(keep.size()) && keep[j] == b) ++j;
    else dropped.push_back(b);
  std::printf("kept blocks: %s (dropped %s)\n", blocks_text(keep).c_str(), blocks_text(dropped).c_str());
  write_pruned_weights(job.teacher, job.out, keep, pruned_by(job));
  std::printf("wrote %s\n", job.out.c_str());
}

}  // namespace

int run_prune(const PruneOptions& opt) {
  PruneJob job;
  collective_check([&] { job = resolve_job(opt); });
  if (world_rank() == 0) say_what(job);
  std::vector<int> keep = job.keep;
  // Learning is every rank's (its collectives agree on failures as training does); the rest is
  // one rank's, and its failure reaches every rank as one message.
  if (job.method == PruneMethod::Learned) keep = learn_kept_blocks(job.learned);
  collective_check([&] {
    if (world_rank() != 0) return;
    if (job.method == PruneMethod::Score) keep = keep_by_score(job);
    write_student(job, keep);
  });
  return 0;
}

std::function<int()> add_prune_command(CLI::App& app) {
  auto opt = std::make_shared<PruneOptions>();
  CLI::App* cmd = app.add_subcommand(
      "prune",
      "A smaller DiT from trained weights by depth pruning (TinyFusion): keep --depth of the teacher's blocks, "
      "given (--method index --keep i,j,...), chosen by a block score on a calibration batch (--method score), or "
      "learned (--method learned: the teacher trains for --steps with each block's residual gated by a choice drawn "
      "per sample and group by Gumbel-softmax from learnable logits; the EMA logits decide, and the file keeps the "
      "teacher's original weights of the chosen blocks; runs under mpirun at --tp x --pp). "
      "The scores see what the model sees in training: x_t = q_sample(x0, t, noise) (ddpm) or the flow path "
      "t x0 + (1 - t) noise, at timesteps drawn uniformly (the TinyFusion reference feeds the clean x0).");
  cmd->add_option("--run", opt->run_dir, "A training run folder (its ema.h5; its config.toml names the dataset)");
  cmd->add_option("--weights", opt->weights, "A weights HDF5 file");
  cmd->add_option("--depth", opt->depth, "Blocks of the pruned model (below the teacher's)")->required();
  cmd->add_option("--method", opt->method,
                  "index (the --keep blocks), score (the --score of each block) or learned (gated training)")
      ->required();
  CLI::Option* keep = cmd->add_option("--keep", opt->keep, "index: the teacher blocks kept, e.g. 0,2,5");
  CLI::Option* score = cmd->add_option(
      "--score", opt->score,
      "score: cos (mean cosine similarity of a block's input and output; the most similar go) or loss (the rise "
      "of the training loss when the block alone is skipped; the least rise goes). The last block always stays");
  score->capture_default_str();
  cmd->add_option("--calibration", opt->calibration, "score: calibration images from the dataset")
      ->capture_default_str();
  cmd->add_option("--data", opt->data,
                  "score: the calibration dataset; learned: the training dataset (default: the run's data.path, "
                  "or the demo's)");
  cmd->add_option("--seed", opt->seed,
                  "score: seed of the calibration images, timesteps and noise (learned: --set train.seed=N)")
      ->capture_default_str();
  cmd->add_option("--out", opt->out, "The pruned weights file")->required();
  std::vector<CLI::Option*> learned = {
      cmd->add_option("--groups", opt->groups,
                      "learned: groups of M blocks keeping N each, tiling the teacher's depth, e.g. 4:2,4:2 (default: "
                      "2 of every 2r blocks, r = teacher depth / --depth, or 1 of every r)"),
      cmd->add_option("--steps", opt->steps, "learned: training steps of the gates")->capture_default_str(),
      cmd->add_option("--lr", opt->lr,
                      "learned: learning rate of the weights (full updates), or of the LoRA adapters with --lora; 0: "
                      "logits only")
          ->capture_default_str(),
      cmd->add_option("--lora", opt->lora,
                      "learned: train rank-R LoRA adapters of the block linears (alpha 2R) instead of the weights; "
                      "0: full updates")
          ->capture_default_str(),
      cmd->add_option("--gate-lr", opt->gate_lr, "learned: learning rate of the logits (default 10 x --lr)"),
      cmd->add_option("--gate-ema", opt->gate_ema,
                      "learned: EMA decay of the logits, whose argmax decides (0: the last logits; a run much "
                      "shorter than 1 / (1 - decay) steps decides on little)")
          ->capture_default_str(),
      cmd->add_option("--tau", opt->tau, "learned: Gumbel-softmax temperature START,END, linear over the steps")
          ->delimiter(',')
          ->expected(2)
          ->capture_default_str(),
      cmd->add_option("--scaling", opt->scaling, "learned: logit scale START,END, linear over the steps")
          ->delimiter(',')
          ->expected(2)
          ->capture_default_str(),
      cmd->add_option("--tp", opt->tp, "learned: tensor-parallel size (dp: the ranks left)")->capture_default_str(),
      cmd->add_option("--pp", opt->pp, "learned: pipeline stages")->capture_default_str(),
      cmd->add_option("--log-every", opt->log_every, "learned: steps between progress lines (default: about 20 lines)"),
      cmd->add_option("--set", opt->sets,
                      "learned: KEY=VALUE of the learning run's config (the run's config.toml, or the demo's), "
                      "e.g. train.global_batch=64; repeatable")};
  return [cmd, opt, keep, score, learned] {
    if (!*cmd) return -1;
    opt->keep_given = keep->count() > 0;
    opt->score_given = score->count() > 0;
    for (CLI::Option* o : learned) opt->learned_given = opt->learned_given || o->count() > 0;
    return run_prune(*opt);
  };
}

}  // namespace dit
