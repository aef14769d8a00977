// The run's training settings, checked once (see train_setup.h).
#include "engine/train_setup.h"

#include <filesystem>

#include "core/error.h"
#include "io/saved_meaning.h"
#include "io/weights.h"

namespace dit {

TrainConfig train_config(const RunConfig& c) {
  TrainConfig t;
  t.global_batch = c.train.global_batch;
  t.micro_batch = c.train.micro_batch;
  t.steps = c.train.steps;
  t.adamw.lr = c.train.lr;
  t.adamw.beta1 = c.train.beta1;
  t.adamw.beta2 = c.train.beta2;
  t.adamw.eps = c.train.eps;
  t.adamw.weight_decay = c.train.weight_decay;
  t.warmup = c.train.warmup;
  t.lr_schedule = c.train.lr_schedule;
  t.min_lr = c.train.min_lr;
  t.grad_clip = c.train.grad_clip;
  t.loss_scale = c.train.loss_scale;
  t.loss_scale_window = c.train.loss_scale_window;
  t.ema_decay = c.train.ema_decay;
  t.ema_warmup = c.train.ema_warmup;
  t.seed = c.train.seed;
  t.schedule = c.parallel.schedule;
  t.pp_layers = c.parallel.pp_layers;
  t.virtual_stages = c.parallel.virtual_stages;
  t.stage.recompute = c.train.recompute;
  t.stage.recompute_blocks = c.train.recompute_blocks;
  t.stage.sequence_parallel = c.parallel.sequence_parallel;
  t.stage.placement = placement_of(c.parallel.schedule);
  t.grad_reduce = c.train.grad_reduce;
  t.diffusion_steps = c.diffusion.steps;
  t.objective = c.diffusion.train_objective();
  return t;
}

TrainSetup TrainSetup::make(const DiTConfig& model, const TrainConfig& train, const Layout& layout) {
  DIT_CHECK(model.num_heads % layout.tp == 0 && model.ffn_hidden() % layout.tp == 0, "parallel.tp = ", layout.tp,
            " does not divide model.num_heads = ", model.num_heads, " and the MLP width ", model.ffn_hidden());
  TrainSetup s;
  s.model = model;
  s.train = train;
  s.train.stage.placement = placement_of(train.schedule);  // the schedule decides the chunks' places
  s.layout = layout;
  if (train.schedule == ScheduleKind::ZbV && train.pp_layers.empty()) check_v_split(layout.pp, model.depth);
  s.chunks = partition_chunks(model, layout.pp, train.virtual_stages, train.pp_layers);
  check_stage_options(train.stage, s.chunks);
  if (train.distill.enabled()) {
    const DiTConfig& t = train.distill.teacher_model;
    DIT_CHECK(t.num_heads % layout.tp == 0 && t.ffn_hidden() % layout.tp == 0 && (6 * t.hidden_size) % layout.tp == 0,
              "distill.teacher = ", train.distill.teacher, ": parallel.tp = ", layout.tp,
              " does not divide the teacher's num_heads = ", t.num_heads, " and MLP width ", t.ffn_hidden());
    DIT_CHECK(!train.stage.sequence_parallel || t.num_patches() == model.num_patches(), "distill.teacher = ",
              train.distill.teacher, ": sequence parallelism needs the teacher's tokens per image (",
              t.num_patches(), ") to be the student's (", model.num_patches(), ")");
    s.teacher_chunks = dit::teacher_chunks(t, s.chunks, train.distill.pairs);
  }
  if (train.gates.enabled()) {
    DIT_CHECK(!train.distill.enabled(), "learned pruning trains without distill.teacher");
    const GateGroup& last = train.gates.groups.back();
    DIT_CHECK(last.first + last.size == model.depth, "learned pruning: the groups cover ", last.first + last.size,
              " blocks of a model of depth ", model.depth);
  }
  s.batch = BatchPlan::make(train.global_batch, layout.dp, train.micro_batch);
  check_virtual_stages(train.schedule, layout.pp, s.batch.microbatches, train.virtual_stages);
  return s;
}

void check_teacher(const RunConfig& cfg) {
  const std::string& path = cfg.distill.teacher;
  if (path.empty()) return;
  DIT_CHECK(std::filesystem::is_regular_file(path), "distill.teacher = ", path,
            std::filesystem::exists(path) ? ": is not a file" : ": no such file", " (expected a weights .h5 file)");
  check_same_meaning(cfg.distill.feature_weight > 0 ? MeaningCheck::TeacherFeatures : MeaningCheck::Teacher,
                     meaning_of_weights(path), path, meaning_of(cfg), "the student's config");
}

TrainSetup TrainSetup::make(const RunConfig& cfg, const Layout& layout) {
  TrainConfig t = train_config(cfg);
  if (!cfg.distill.teacher.empty()) {
    check_teacher(cfg);
    const std::string& path = cfg.distill.teacher;
    const DiTConfig teacher = read_weights_config(path);
    std::vector<int> kept;
    if (!cfg.run.init_from.empty() && std::filesystem::is_regular_file(cfg.run.init_from)) {
      check_pruned_from(cfg.run.init_from, path, teacher.depth);
      kept = read_kept_layers(cfg.run.init_from);
    }
    t.distill = distill_settings(cfg, teacher, kept);
  }
  return make(cfg.model.dit, t, layout);
}

}  // namespace dit
