// The run's training settings, checked once (see train_setup.h).
#include "engine/train_setup.h"

#include <filesystem>
#include <sstream>

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
  t.loss_spike_z = c.train.loss_spike_z;
  t.skip_loss_spikes = c.train.skip_loss_spikes;
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
  t.zero = c.optim.zero;
  t.bucket_mib = c.optim.bucket_mib;
  t.overlap = c.optim.overlap;
  t.offload = c.optim.offload == "cpu";
  t.diffusion_steps = c.diffusion.steps;
  t.objective = c.diffusion.train_objective();
  return t;
}

namespace {
// distill.student_layers / teacher_layers against both models' depths, and the widths feature pairs
// compare (RunConfig::validate checked that the lists pair up; the default pairs fit by construction).
void check_feature_pairs(const DistillSection& d, const DiTConfig& student, const DiTConfig& teacher) {
  if (d.feature_weight <= 0) return;
  std::vector<bool> seen(static_cast<std::size_t>(student.depth), false);
  for (std::size_t k = 0; k < d.student_layers.size() && k < d.teacher_layers.size(); ++k) {
    const int s = d.student_layers[k], t = d.teacher_layers[k];
    DIT_CHECK(s >= 0 && s < student.depth, "distill.student_layers: block ", s, " is outside the student's ",
              student.depth, " blocks (expected 0..", student.depth - 1, ")");
    DIT_CHECK(t >= 0 && t < teacher.depth, "distill.teacher_layers: block ", t, " is outside the teacher's ",
              teacher.depth, " blocks (expected 0..", teacher.depth - 1, ")");
    DIT_CHECK(!seen[static_cast<std::size_t>(s)], "distill.student_layers: student block ", s,
              " appears twice (one feature pair per student block)");
    seen[static_cast<std::size_t>(s)] = true;
  }
  DIT_CHECK(student.hidden_size == teacher.hidden_size, "distill.feature_weight > 0 pairs hidden states of the ",
            "student (hidden_size ", student.hidden_size, ") and the teacher (hidden_size ", teacher.hidden_size,
            "): expected equal widths, or distill.feature_weight = 0 (output KD only)");
}
// The feature pairs against the student's stage split: each stage must hold its pairs' teacher
// blocks; the message names the pairs' keys or the split that would serve (parallel.pp_layers).
void check_teacher_split(const DiTConfig& teacher, const std::vector<StageLayout>& chunks,
                         const std::vector<FeaturePair>& pairs) {
  if (teacher_fits(teacher, chunks, pairs)) return;
  const std::vector<int> split = serving_student_split(teacher, chunks, pairs);
  std::ostringstream counts, pair_list, fix;
  for (const StageLayout& l : chunks) counts << (counts.tellp() > 0 ? "," : "") << l.end_block - l.first_block;
  for (const FeaturePair& p : pairs)
    pair_list << (pair_list.tellp() > 0 ? "; " : "") << "student block " << p.student << " <-> teacher block "
              << p.teacher;
  for (int k : split) fix << (fix.tellp() > 0 ? "," : "") << k;
  DIT_FAIL("distill: the feature pairs (", pair_list.str(), ") cannot each live on one pipeline stage with the ",
           "student's blocks split ", counts.str(), ": a later stage's pair reaches an earlier teacher block; ",
           split.empty() ? std::string("pair the blocks in order (distill.student_layers / teacher_layers)")
                         : "a split that would serve: parallel.pp_layers = [" + fix.str() + "]");
}
}  // namespace

// The rules that need the layout, the stage split or the world's dp (RunConfig::validate checked
// every key alone and with the others, the stage split included): each message names the key, the
// value and what would fit. The chunks and the batch plan are built after them, by code that keeps
// only its own invariants.
TrainSetup TrainSetup::make(const DiTConfig& model, const TrainConfig& train, const Layout& layout) {
  TrainSetup s;
  s.model = model;
  s.train = train;
  s.train.stage.placement = placement_of(train.schedule);  // the schedule decides the chunks' places
  s.layout = layout;
  s.chunks = partition_chunks(model, layout.pp, train.virtual_stages, train.pp_layers);
  // RunConfig::validate_layout named parallel.tp against the heads and MLP width: an invariant here.
  DIT_CHECK(model.num_heads % layout.tp == 0 && model.ffn_hidden() % layout.tp == 0, "tp ", layout.tp,
            " does not divide the model's ", model.num_heads, " heads and MLP width ", model.ffn_hidden());
  const int recompute_blocks = train.stage.recompute_blocks;
  for (std::size_t c = 0; c < s.chunks.size() && recompute_blocks > 0; ++c) {
    const int blocks = s.chunks[c].end_block - s.chunks[c].first_block;
    DIT_CHECK(recompute_blocks <= blocks, "train.recompute_blocks = ", recompute_blocks, " but pipeline stage ", c,
              " has only ", blocks, " block", blocks == 1 ? "" : "s", "; use at most ", blocks, " (or 0 for every block)");
  }
  const std::int64_t per_step = std::int64_t(layout.dp) * train.micro_batch;
  DIT_CHECK(train.global_batch % per_step == 0, "train.global_batch = ", train.global_batch, " is not divisible by dp (",
            layout.dp, ") x train.micro_batch (", train.micro_batch, ") = ", per_step, "; e.g. global_batch = ",
            per_step * ((train.global_batch + per_step - 1) / per_step), " would fit");
  const std::int64_t microbatches = train.global_batch / per_step;
  DIT_CHECK(microbatches <= kMaxMicrobatches, "train.global_batch = ", train.global_batch, " is ", microbatches,
            " microbatches of train.micro_batch = ", train.micro_batch, " per dp rank (dp = ", layout.dp, "), at most ",
            kMaxMicrobatches, " fit a step; raise train.micro_batch or lower train.global_batch");
  DIT_CHECK(microbatches * train.virtual_stages <= kMaxMicrobatches, "parallel.virtual_stages = ",
            train.virtual_stages, " with ", microbatches, " microbatches (", "train.global_batch = ", train.global_batch,
            "): at most ", kMaxMicrobatches,
            " (chunk, microbatch) pairs per step (MPI tag space); raise train.micro_batch or lower train.global_batch");
  if (train.gates.enabled()) {
    DIT_CHECK(!train.distill.enabled(), "learned pruning trains without distill.teacher");
    const GateGroup& last = train.gates.groups.back();
    DIT_CHECK(last.first + last.size == model.depth, "learned pruning: the groups cover ", last.first + last.size,
              " blocks of a model of depth ", model.depth);
  }
  // BatchPlan::make's invariants hold by the checks above.
  s.batch = {.global_batch = train.global_batch, .dp = layout.dp, .micro_batch = train.micro_batch,
             .microbatches = static_cast<int>(microbatches)};
  if (train.distill.enabled()) {
    const DiTConfig& t = train.distill.teacher_model;
    DIT_CHECK(t.num_heads % layout.tp == 0 && t.ffn_hidden() % layout.tp == 0 && (6 * t.hidden_size) % layout.tp == 0,
              "distill.teacher = ", train.distill.teacher, ": parallel.tp = ", layout.tp,
              " does not divide the teacher's num_heads = ", t.num_heads, " and MLP width ", t.ffn_hidden());
    DIT_CHECK(!train.stage.sequence_parallel || t.num_patches() == model.num_patches(), "distill.teacher = ",
              train.distill.teacher, ": sequence parallelism needs the teacher's tokens per image (",
              t.num_patches(), ") to be the student's (", model.num_patches(), ")");
    check_teacher_split(t, s.chunks, train.distill.pairs);
    s.teacher_chunks = dit::teacher_chunks(t, s.chunks, train.distill.pairs);
  }
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
    check_feature_pairs(cfg.distill, cfg.model.dit, teacher);
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
