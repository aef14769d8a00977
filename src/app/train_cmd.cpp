// `dit_mp train` (see train_cmd.h).
#include "app/train_cmd.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <filesystem>

#include "io/command_files.h"
#include "core/quote.h"
#include "engine/rank_backend.h"
#include "engine/train_setup.h"
#include "eval/quality.h"
#include "io/prepare.h"
#include "io/sealed_h5.h"
#include "io/vae_weights.h"
#include "parallel/device_placement.h"
#include "parallel/world.h"
#include "plan/layout_choice.h"
#include "plan/memory_fit.h"
#include "run/rank_map.h"
#include "run/layout_tune.h"
#include "run/run.h"
#include "run/run_folder.h"
#include "run/run_lock.h"
#include "run/signals.h"

namespace dit {

namespace fs = std::filesystem;

namespace {

// The run's files by role (io/command_files.h), checked before any is read or created.
void check_train_files(const RunConfig& cfg, const std::string& config) {
  const EvalPaths eval = eval_paths(cfg);  // declared even when train.eval_every = 0: never to be overwritten
  check_command_files(
      "train",
      [&](const FileDecl& d) -> std::string {
        const std::string key = d.key;
        if (key == "data.path") return cfg.data.path;
        if (key == "data.vae") return cfg.data.vae;
        if (key == "data.vae_config") return vae_config_path(cfg.data.vae, cfg.data.vae_config);
        if (key == "run.init_from") return cfg.run.init_from;
        if (key == "run.resume") return cfg.run.resume == "auto" ? "" : cfg.run.resume;
        if (key == "distill.teacher") return cfg.distill.teacher;
        if (key == "eval.reference") return eval.reference;
        if (key == "eval.classifier") return eval.classifier;
        if (key == "run.dir") return cfg.run.dir;
        if (key == "run.checkpoint_dir" && d.kind == FileKind::Lock) return cfg.run.checkpoint_dir;  // given only
        if (key == "run.checkpoint_dir")
          return cfg.run.checkpoint_dir.empty() ? (fs::path(cfg.run.dir) / "ckpt").string() : cfg.run.checkpoint_dir;
        return config;  // --config
      },
      cfg.run.overwrite ? RunFolderUse::Replaced : RunFolderUse::Kept,
      cfg.run.overwrite ? ForeignPicture::Replaced : ForeignPicture::Refused);
}

// The flags that stand for one config key each: --tp 2 is --set parallel.tp=2.
struct KeyFlag {
  const char* name;
  const char* key;
  const char* help;
  bool quoted;  // a string value (quoted for TOML)
  const char* type;
};
constexpr KeyFlag kKeyFlags[] = {
    {"--tp", "parallel.tp", "Tensor-parallel size", false, "INT"},
    {"--pp", "parallel.pp", "Pipeline stages", false, "INT"},
    {"--schedule", "parallel.schedule", "Pipeline schedule: 1f1b, gpipe, zb-h1 or zb-v", true, "TEXT"},
    {"--pp-layers", "parallel.pp_layers", "Blocks per stage, e.g. 3,4,4,3", false, "LIST"},
    {"--virtual-stages", "parallel.virtual_stages", "Model chunks per pipeline rank (> 1: interleaved 1F1B)", false,
     "INT"},
    {"--steps", "train.steps", "Training steps", false, "INT"},
    {"--global-batch", "train.global_batch", "Images per step over all ranks", false, "INT"},
    {"--micro-batch", "train.micro_batch", "Images per microbatch", false, "INT"},
    {"--lr", "train.lr", "Peak learning rate", false, "FLOAT"},
    {"--seed", "train.seed", "Random seed", false, "INT"},
    {"--log-every", "train.log_every", "Steps between log lines", false, "INT"},
    {"--sample-every", "train.sample_every", "Steps between sample grids (0: only at the end)", false, "INT"},
    {"--profile", "train.profile",
     "Record a timeline of steps A to B (e.g. 5:8) of every rank into <run-dir>/trace.json (Perfetto, chrome://tracing)",
     true, "A:B"},
    {"--backend", "train.backend", "cpu or cuda", true, "TEXT"},
    {"--precision", "train.precision", "fp32, bf16 or fp16", true, "TEXT"},
    {"--zero", "optim.zero",
     "What data parallelism shards: 1 optimizer state, 2 and gradients, 3 and parameters (fully sharded)", false,
     "INT"},
    {"--run-dir", "run.dir", "Run folder (metrics, samples, weights)", true, "TEXT"},
    {"--data", "data.path", "HDF5 dataset file", true, "TEXT"},
    {"--model", "model.preset", "Model preset, e.g. DiT-S/4 or LightningDiT-B/2", true, "TEXT"},
    {"--mlp", "model.mlp", "Block MLP: gelu (DiT) or swiglu (LightningDiT's SwiGLU, hidden 2/3 of the width)", true,
     "TEXT"},
    {"--norm", "model.norm", "Norms of the blocks and final layer: layernorm or rmsnorm (with weights)", true, "TEXT"},
    {"--pos-embed", "model.pos_embed", "sincos, or rope (2-D rotary embedding of q and k; sin-cos kept)", true,
     "TEXT"},
    {"--resume", "run.resume", "Continue from a checkpoint: auto (the newest of the run) or a path", true, "TEXT"},
    {"--init-from", "run.init_from", "Start from weights: a checkpoint or a weights .h5 file", true, "TEXT"},
    {"--teacher", "distill.teacher",
     "Distill from this teacher's weights file (TinyFusion's masked KD; the [distill] keys set the weights)", true,
     "TEXT"},
    {"--checkpoint-dir", "run.checkpoint_dir", "Checkpoint folder (default: <run dir>/ckpt)", true, "TEXT"},
    {"--checkpoint-every", "train.checkpoint_every", "Steps between checkpoints (0: only at the end)", false, "INT"},
    {"--recompute", "train.recompute", "Activation recomputation: none, selective or full", true, "TEXT"},
    {"--recompute-blocks", "train.recompute_blocks", "Full recomputation for the first K blocks of each stage (0: all)",
     false, "INT"},
    {"--objective", "diffusion.objective",
     "ddpm (DiT: epsilon) or flow (SiT's linear path, velocity; needs model.learn_sigma = false and a flow "
     "--sampler)",
     true, "TEXT"},
    {"--timestep-sampling", "diffusion.timestep_sampling",
     "uniform or logit_normal (t = sigmoid(m + s u): diffusion.logit_normal_mean, _std)", true, "TEXT"},
    {"--loss-weight", "diffusion.loss_weight", "none or min_snr (ddpm: min(SNR, diffusion.min_snr_gamma) / SNR)", true,
     "TEXT"},
    {"--sampler", "sample.sampler", "Sampler of the grids: ddim or ddpm (ddpm); euler, heun or euler_maruyama (flow)",
     true, "TEXT"},
};
// The layout search's flags, train's alone (plan --fit takes the memory as --fit, the hardware as
// --hardware of its own).
constexpr KeyFlag kLayoutFlags[] = {
    {"--layout", "parallel.layout",
     "fixed (the tp/pp/micro-batch/recompute flags and keys as given), auto (the planner's --fit search picks "
     "them for this job's ranks and memory; flags given constrain it) or tune (the search's "
     "parallel.tune_candidates fastest are each trained for parallel.tune_steps steps, and the fastest measured is kept)",
     true, "TEXT"},
    {"--hardware", "parallel.hardware",
     "--layout auto: rtx3090, rtx4090, a100-40g, a100-80g, h100, h200 or cpu (its memory, FLOP/s and links)", true,
     "NAME"},
    {"--memory-gib", "parallel.memory_gib",
     "--layout auto: memory per rank in GiB (default: --hardware's, on CUDA the device's free memory, on the CPU "
     "the cgroup's or machine's limit over its ranks)",
     false, "GIB"},
};

void add_key_flag(CLI::App* cmd, TrainFlags& f, const KeyFlag& fl) {
  cmd->add_option_function<std::string>(
         fl.name,
         [&f, fl](const std::string& v) {
           std::string value = fl.quoted ? quote_string(v) : v;
           if (std::string(fl.key) == "parallel.pp_layers") value = "[" + v + "]";
           f.flags.emplace_back(fl.key, value);
         },
         fl.help)
      ->type_name(fl.type);
}

// What the checks hand the run: its settings, resolved and checked once for the job's layout,
// and the plan of each stage, made once (the first step is checked against it).
struct CheckedRun {
  TrainSetup setup;
  std::vector<MemoryAccount> planned;
  RunLock checkpoints;  // rank 0's lock on a run.checkpoint_dir outside the run folder
};

// Whether run.checkpoint_dir lies outside the run folder (whose lock covers what is inside it).
bool checkpoints_apart(const RunConfig& cfg) {
  if (cfg.run.checkpoint_dir.empty()) return false;
  std::error_code ec;
  const std::string root = fs::weakly_canonical(fs::absolute(cfg.run.checkpoint_dir, ec), ec).string();
  const std::string dir = fs::weakly_canonical(fs::absolute(cfg.run.dir, ec), ec).string();
  return root.rfind(dir + "/", 0) != 0;
}

// A distilled run records its teacher's checksum (the file's seal) in its config; a given one must match.
void record_teacher_checksum(RunConfig& cfg) {
  if (cfg.distill.teacher.empty()) return;
  char crc[16];
  std::snprintf(crc, sizeof crc, "%08x",
                h5::verified_crc32(cfg.distill.teacher, "re-import it with tools/dit_checkpoint.py import"));
  DIT_CHECK(cfg.distill.teacher_crc32.empty() || cfg.distill.teacher_crc32 == crc, "distill.teacher_crc32 = ",
            cfg.distill.teacher_crc32, ": the teacher ", cfg.distill.teacher, " has CRC-32 ", crc,
            ": another file than the one given; name that teacher, or leave distill.teacher_crc32 unset");
  cfg.distill.teacher_crc32 = crc;
}

// The setup and the plan of each stage at `layout`.
void plan_run(CheckedRun& run, const RunConfig& cfg, const Layout& layout, const RunDraws& draws) {
  run.setup = TrainSetup::make(cfg, layout);
  const int ranks_per_node = std::max(1, world_size() / node_count());
  run.planned = plan_training(run.setup, draws, ranks_per_node, "the model.* sizes, train.micro_batch or sample.per_class");
}

// Readies a run, agreed by every rank (a failing rank's message ends the job): every check it needs
// before its folder is touched, the setup and plan it will use, rank 0's lock on the run folder, a
// distilled run's teacher checksum recorded in `cfg`, and the demo's dataset prepared on first use
// (rank 0 writes, atomically). A dry run stops after the checks that touch no file of the run.
CheckedRun ready_run(RunConfig& cfg, TrainMode mode, RunLock& lock) {
  CheckedRun run;
  collective_check([&] {
    const Layout layout = layout_for_world(cfg.parallel.tp, cfg.parallel.pp);
    RunDraws draws = run_draws(cfg);
    // A latent run's grids are decoded by data.vae: its decode is planned with the sampling.
    if (!cfg.data.vae.empty()) draws.drawn.vae = open_vae(cfg.data.vae, cfg.data.vae_config).config;
    const EvalPaths eval = eval_paths(cfg);
    const std::string backend = backend_name(cfg.backend_str(), cfg.precision_str());
    plan_run(run, cfg, layout, draws);
    std::string why;
    DIT_CHECK(backend_available(backend, &why), "train.backend = ", cfg.backend_str(), " with train.precision = ",
              cfg.precision_str(), ": ", why);
    record_teacher_checksum(cfg);
    if (mode == TrainMode::DryRun) return;
    DIT_CHECK(cfg.run.resume.empty() || !cfg.run.overwrite, "run.resume and run.overwrite exclude each other");
    DIT_CHECK(cfg.run.resume.empty() || cfg.run.init_from.empty(),
              "run.resume and run.init_from exclude each other (resume continues a run, init_from starts one)");
    if (world_rank() != 0) return;
    const fs::path dir(cfg.run.dir);
    std::string note;  // the lock is taken before the folder is looked at, overwritten or resumed
    lock = RunLock::acquire(dir.string(), &note);
    if (!note.empty()) std::printf("note: %s\n", note.c_str());
    // Two runs saving into one checkpoint folder would replace each other's step folders.
    if (checkpoints_apart(cfg)) {
      note.clear();
      run.checkpoints = RunLock::acquire(cfg.run.checkpoint_dir, &note, {"checkpoint folder", "run", "run.checkpoint_dir"});
      if (!note.empty()) std::printf("note: %s\n", note.c_str());
    }
    if (fs::exists(dir) && !cfg.run.overwrite && cfg.run.resume.empty()) {
      DIT_CHECK(holds_failed_start(dir.string()), "run folder ", dir.string(),
                " already exists: choose another run.dir, continue it with --resume auto, or pass --overwrite");
      std::printf("note: run folder %s holds only what a start that failed before its first step left (its "
                  "config.toml, empty logs): replacing it\n", dir.string().c_str());
    }
    if (cfg.run.overwrite) check_overwritable(cfg);
    if (!cfg.run.resume.empty()) check_resumable(cfg);
    // The classifier is trained at the first evaluation, if it must be; bad [eval] inputs are
    // refused now.
    if (cfg.train.eval_every > 0) check_evaluation_inputs(eval, cfg.data.prepare);
    if (fs::exists(cfg.data.path)) return;
    if (cfg.data.prepare == "fashion-mnist") {
      std::printf("preparing Fashion-MNIST into %s\n", cfg.data.path.c_str());
      if (fs::path(cfg.data.path).has_parent_path()) fs::create_directories(fs::path(cfg.data.path).parent_path());
      prepare_fashion_mnist(kFashionMnistDir, cfg.data.path, "train");
      return;
    }
    DIT_FAIL("data.path = ", cfg.data.path, " does not exist (and data.prepare = ", cfg.data.prepare,
             "); create it with dit_mp prepare-data");
  });
  return run;
}

// --dry-run: the layout and where every rank runs, without touching data or the run folder.
int dry_run(const RunConfig& cfg, const Layout& layout) {
  const RankSetup rank = make_rank({.backend = cfg.backend_str(), .precision = cfg.precision_str(),
                                    .layout = layout, .comms = TensorComms::Leave});
  const std::string map = rank_map(rank.ctx, rank.device);
  if (rank.ctx.world_rank == 0)
    std::printf("dit_mp train --dry-run: %s, %s backend, model %lld parameters, run folder %s (not touched)\n%s",
                layout.str().c_str(), rank.backend->name().c_str(), static_cast<long long>(cfg.model.dit.num_params()),
                cfg.run.dir.c_str(), map.c_str());
  return 0;
}

}  // namespace

int run_train(const RunConfig& given, TrainMode mode, const FitConstraints& fixed) {
  install_stop_handlers();
  RunLock lock;  // rank 0 holds the run folder's lock until this function returns
  RunConfig cfg = given;
  CheckedRun checked = ready_run(cfg, mode, lock);
  if (mode == TrainMode::DryRun) return dry_run(cfg, checked.setup.layout);
  std::optional<TuneResult> tuned;  // a fresh run's layout measured among the search's (the data is ready)
  if (cfg.parallel.layout == LayoutMode::Tune && cfg.run.resume.empty()) {
    tuned = tune_layout(cfg, fixed);
    cfg = tuned->chosen;
    collective_check([&] { plan_run(checked, cfg, layout_for_world(cfg.parallel.tp, cfg.parallel.pp), run_draws(cfg)); });
  }
  defer_stop_signals();  // a stop signal from here on is answered at a step boundary, with a checkpoint
  Run run(cfg, checked.setup, std::move(checked.planned));
  if (tuned) run.record_tune(tuned->json, tuned->table);
  return run.train();
}

bool TrainFlags::gave(const std::string& key) const {
  for (const auto& s : sets)
    if (s.rfind(key + "=", 0) == 0) return true;
  for (const auto& [k, v] : flags)
    if (k == key) return true;
  return false;
}

void add_train_options(CLI::App* cmd, TrainFlags& f) {
  cmd->add_option("--config", f.config, "TOML config file (default: the Fashion-MNIST demo, configs/fashion_mnist.toml)");
  cmd->add_option("--set", f.sets, "Override any config key: --set train.lr=3e-4 (repeatable)");
  cmd->add_flag("--overwrite", f.overwrite, "Replace an existing run folder");
  cmd->add_flag_callback(
      "--sequence-parallel", [&f] { f.flags.emplace_back("parallel.sequence_parallel", "true"); },
      "Megatron sequence parallelism: tokens split over the tp ranks outside the tp GEMMs (tp > 1)");
  for (const KeyFlag& fl : kKeyFlags) add_key_flag(cmd, f, fl);
}

RunConfig resolve_config(const TrainFlags& f) {
  RunConfig cfg = f.config.empty() ? RunConfig::demo() : RunConfig::from_file(f.config);
  for (const auto& s : f.sets) cfg.set(s);
  for (const auto& [key, value] : f.flags) cfg.set(key + "=" + value);
  if (f.overwrite) cfg.run.overwrite = true;
  cfg.validate();
  return cfg;
}

std::function<int()> add_train_command(CLI::App& app) {
  auto flags = std::make_shared<TrainFlags>();
  CLI::App* cmd = app.add_subcommand("train", "Train a DiT (the default subcommand)");
  add_train_options(cmd, *flags);
  for (const KeyFlag& fl : kLayoutFlags) add_key_flag(cmd, *flags, fl);
  cmd->add_flag("--dry-run", flags->dry_run, "Check the inputs, print the layout and the rank map, and stop");
  return [cmd, flags] {
    if (!*cmd) return -1;
    RunConfig cfg;
    collective_check([&] {
      cfg = resolve_config(*flags);
      check_train_files(cfg, flags->config);  // before any other file is read or created
      // 0 in a file means "not given" (the hardware's or the device's memory); on the command line
      // it is a limit, and no limit fits in none.
      DIT_CHECK(!flags->gave("parallel.memory_gib") || cfg.parallel.memory_gib > 0, "parallel.memory_gib = ",
                cfg.parallel.memory_gib, " (--memory-gib): expected the memory per rank in GiB, a number > 0");
    });
    const FitConstraints fixed = fit_constraints([&](const std::string& key) { return flags->gave(key); }, cfg);
    if (cfg.parallel.layout != LayoutMode::Fixed) cfg = resolve_auto_layout(cfg, fixed);
    return run_train(cfg, flags->dry_run ? TrainMode::DryRun : TrainMode::Train, fixed);
  };
}

}  // namespace dit
