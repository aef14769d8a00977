// Starting a run from a checkpoint or weights (see resume.h).
#include "run/resume.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "backend/cpu/cpu_backend.h"
#include "core/clock.h"
#include "engine/global_tensors.h"
#include "io/atomic_file.h"
#include "io/checkpoint.h"
#include "io/checkpoint_format.h"
#include "io/saved_meaning.h"
#include "io/weights.h"
#include "parallel/world.h"
#include "run/run_identity.h"
#include "io/file_safety.h"

namespace dit {

namespace fs = std::filesystem;

namespace {

// A resumed run rewrites the steps after its checkpoint: their old metrics rows go.
void drop_metrics_after(const fs::path& path, std::int64_t step) {
  require_regular(path.string(), "the run's metrics");
  std::ifstream in(path);
  if (!in) return;
  std::vector<std::string> keep;
  for (std::string line; std::getline(in, line);) {
    const auto at = line.find("\"step\": ");
    if (at != std::string::npos && std::stoll(line.substr(at + 8)) > step) continue;
    keep.push_back(line);
  }
  in.close();
  std::string text;
  for (const auto& l : keep) text += l + "\n";
  write_file_atomic(path.string(), text, "metrics");
}

// A resumed run keeps what its checkpoint's numbers mean (io/saved_meaning.h): the settings its
// config_toml records. A config this version cannot read (or one from before objectives) is taken
// as the run's own with objective ddpm, as such checkpoints were.
void check_same_meaning_as(const CheckpointMeta& meta, const RunConfig& cfg, DataKind data) {
  const SavedMeaning now = meaning_of(cfg, data);
  SavedMeaning saved = now;
  saved.objective = diffusion::Objective::Ddpm;
  try {
    saved = meaning_of(RunConfig::from_toml(meta.config_toml, meta.dir + " config_toml"));
  } catch (const Error&) {
  }
  check_same_meaning(MeaningCheck::Resume, saved, meta.dir, now, "this run's config");
}

// A resumed distillation learns from the teacher it started with: the checkpoint's config records
// its CRC-32 (train_cmd records it at the start), which the teacher named now must have.
void check_same_teacher(const CheckpointMeta& meta, const RunConfig& cfg) {
  DistillSection saved;
  try {
    saved = RunConfig::from_toml(meta.config_toml, meta.dir + " config_toml").distill;
  } catch (const Error&) {
  }
  if (saved.teacher.empty() || saved.teacher_crc32.empty()) return;
  DIT_CHECK(!cfg.distill.teacher.empty(), "the checkpoint ", meta.dir, " was distilled from the teacher ", saved.teacher,
            " (CRC-32 ", saved.teacher_crc32, "); resume it with distill.teacher set, or start a new run from its "
            "weights (run.init_from)");
  DIT_CHECK(cfg.distill.teacher_crc32 == saved.teacher_crc32, "distill.teacher = ", cfg.distill.teacher,
            " (CRC-32 ", cfg.distill.teacher_crc32, "): the checkpoint ", meta.dir, " was distilled from ",
            saved.teacher, " (CRC-32 ", saved.teacher_crc32, "); resume it with that teacher, or start a new run "
            "from its weights (run.init_from)");
}

// What a resume checks of its checkpoint before it continues it: the meaning of its numbers, its
// teacher, its run (a note for a checkpoint from before run ids).
std::string check_resumable(const CheckpointMeta& meta, const RunConfig& cfg, DataKind data) {
  check_same_meaning_as(meta, cfg, data);
  check_same_teacher(meta, cfg);
  return check_same_run(meta, cfg.run.id, cfg.run.dir);
}

}  // namespace

// --resume continues a run from a checkpoint (any layout wrote it); --init-from starts a new run
// from weights (a checkpoint or a weights file), with fresh optimizer state and the EMA at them.
std::optional<CheckpointMeta> start_from_checkpoint(const RunConfig& cfg, const std::string& root,
                                                   const DiTConfig& model, ParallelContext& ctx, Trainer& trainer,
                                                   ConsoleLog& console, DataKind data) {
  std::string path = cfg.run.resume == "auto" ? latest_checkpoint(root) : cfg.run.resume;
  const bool resume = !path.empty();
  if (!resume) path = cfg.run.init_from;
  if (path.empty()) {
    if (cfg.run.resume == "auto" && ctx.world_rank == 0)
      console.line("no checkpoint under " + root + ": starting from scratch");
    return std::nullopt;
  }
  const double t0 = now_s();
  StageState state;
  const DiTStage& stage = trainer.model();
  // A file is a weights file unless it is a checkpoint's index (index.h5 beside its COMPLETE
  // marker): a weights file that happens to be named index.h5 is still weights.
  const fs::path p(path);
  const bool checkpoint_index =
      p.filename() == ckpt::kIndexFile && fs::exists(p.parent_path() / ckpt::kCompleteFile);
  const bool weights_file = !resume && fs::is_regular_file(path) && !checkpoint_index;
  if (resume) collective_check([&] {  // before anything is read: the checkpoint a resume means to load
    std::optional<CheckpointMeta> planned;
    try {
      planned = read_checkpoint_meta(path);
    } catch (const Error&) {  // unreadable: the load says why (and --resume auto tries older ones)
    }
    if (planned) check_resumable(*planned, cfg, data);
  });
  CheckpointMeta meta;
  const FlatRange range = trainer.restore_range();  // this rank's shard: all restore() reads
  if (weights_file) {
    // Read in fp32 on the host, whatever the training precision, so the fp32 master weights get
    // the file's values rather than their 16-bit rounding (restore() sets params and master).
    const ParamSet& ps = trainer.model().params();
    CpuBackend host;
    ParamSet fp32(host, ps.specs(), ps.tp(), ps.tp_rank(), ps.padded_numel());
    collective_check([&] { load_weights(path, fp32); });  // every rank reads it: one message
    state.begin = range.begin;
    state.model = host_copy(host, fp32.flat_values().rows(range.begin, range.size()));
    state.ema = state.model;
    state.exp_avg.assign(state.model.size(), 0.f);
    state.exp_avg_sq.assign(state.model.size(), 0.f);
  } else if (cfg.run.resume == "auto") {  // the newest checkpoint that verifies
    std::vector<std::string> skipped;
    meta = load_newest_checkpoint(root, model, stage.params(), ctx, state, skipped, range);
    for (const std::string& s : skipped)
      if (ctx.world_rank == 0) console.line("skipped checkpoint " + s);
  } else {
    meta = load_checkpoint(path, model, stage.params(), ctx, state, range);
    if (!resume) {  // weights only
      state.ema = state.model;
      std::fill(state.exp_avg.begin(), state.exp_avg.end(), 0.f);
      std::fill(state.exp_avg_sq.begin(), state.exp_avg_sq.end(), 0.f);
    }
  }
  std::string note;
  if (resume) collective_check([&] { note = check_resumable(meta, cfg, data); });  // the one loaded (auto may fall back)
  if (!note.empty() && ctx.world_rank == 0) console.line(note);
  LossScaleState scaling;
  if (resume) scaling = {meta.loss_scale, meta.loss_scale_clean_steps, meta.skipped_steps, meta.loss_scaling};
  trainer.restore(state, resume ? meta.step : 0, scaling);
  collective_check([&] {
    if (resume && ctx.world_rank == 0)
      for (const char* rows : {"metrics.jsonl", "ranks.jsonl"})
        if (fs::exists(fs::path(cfg.run.dir) / rows)) drop_metrics_after(fs::path(cfg.run.dir) / rows, meta.step);
  });
  if (ctx.world_rank == 0) {
    char took[32];
    std::snprintf(took, sizeof took, " in %.2f s", now_s() - t0);
    console.line((resume ? "resumed from " + meta.dir + " at step " + std::to_string(meta.step) + " (written at " +
                               meta.layout.str() + ")"
                         : "initialized from " + path) + took);
  }
  if (!resume) return std::nullopt;
  return meta;
}

}  // namespace dit
