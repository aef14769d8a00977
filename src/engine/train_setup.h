// A run's training settings resolved once: the Trainer's settings from the run configuration, the
// model chunks of every pipeline stage, and the batch plan, checked together for a layout. Built
// once inside the run's agreed setup check and handed to the Trainer and the planner, which do
// not check it again.
#pragma once

#include <vector>

#include "engine/batch.h"
#include "engine/dit_pipeline.h"
#include "engine/distill.h"
#include "engine/layer_gates.h"
#include "layers/lora.h"
#include "optim/adamw.h"
#include "optim/loss_scale.h"
#include "parallel/pipeline_schedule.h"
#include "io/config.h"
#include "parallel/grid.h"

namespace dit {

struct TrainConfig {
  std::int64_t global_batch = 32;
  int micro_batch = 8;
  std::int64_t steps = 100;
  AdamWConfig adamw;   // adamw.lr is the peak learning rate
  std::int64_t warmup = 0;
  LrSchedule lr_schedule = LrSchedule::Constant;
  double min_lr = 0.0;
  double grad_clip = 0.0;  // max global grad norm; 0 = off (the official DiT does not clip)
  double loss_spike_z = 0;        // a loss this many standard deviations above the last 50 is a spike; 0 = off
  bool skip_loss_spikes = false;  // a spike's update is skipped as a non-finite loss's is
  double loss_scale = LossScaler::kInitialScale;               // fp16 only: the initial scale
  std::int64_t loss_scale_window = LossScaler::kGrowthInterval;  // fp16 only
  double ema_decay = 0.9999;
  bool ema_warmup = true;
  std::uint64_t seed = 0;
  ScheduleKind schedule = ScheduleKind::OneFOneB;
  int virtual_stages = 1;      // model chunks per pipeline rank (> 1: interleaved 1F1B)
  std::vector<int> pp_layers;  // blocks per stage (per model chunk); empty = balanced
  StageOptions stage;          // activation recomputation (and what else trades memory for time)
  DType grad_reduce = DType::F32;  // dtype of the dp gradient reduction (bf16 halves its bytes)
  int zero = 1;                    // optim.zero: what dp shards (optim/zero.h)
  double bucket_mib = 25;          // optim.bucket_mib: the largest gradient message
  bool overlap = true;             // optim.overlap: communication behind compute
  bool offload = false;            // optim.offload = "cpu": the optimizer state in host memory
  int diffusion_steps = 1000;  // training timesteps of the linear beta schedule (diffusion.steps)
  diffusion::TrainObjective objective;  // diffusion.objective, timestep sampling, loss terms
  DistillSettings distill;              // [distill]: a teacher, or none
  GateSettings gates;                   // learned pruning's block gates (dit_mp prune --method learned), or none
  LoraSettings lora;                    // learned pruning's low-rank updates of the block linears, or none
};

struct TrainSetup {
  DiTConfig model;
  TrainConfig train;
  Layout layout;
  std::vector<StageLayout> chunks;  // the pp x virtual_stages model chunks, in model order
  std::vector<StageLayout> teacher_chunks;  // distillation: the teacher's, aligned with `chunks`
  BatchPlan batch;

  // Throws naming the setting when the layout cannot run these settings: recomputed blocks past
  // a stage's, a global batch that does not split over dp, more (chunk, microbatch) pairs than a
  // step holds, a teacher the stages cannot serve. The rules of the keys alone and together
  // (the stage split, the schedule's chunks, recomputation) are RunConfig::validate_layout's and
  // are not checked again; the chunks keep their own invariants.
  static TrainSetup make(const DiTConfig& model, const TrainConfig& train, const Layout& layout);
  // The Trainer's settings of a validated run configuration (RunConfig::validate) at `layout`.
  // With distill.teacher, reads the teacher's config (and the student's kept layers from
  // run.init_from, when `dit_mp prune` wrote it) and checks both with the pairs.
  static TrainSetup make(const RunConfig& cfg, const Layout& layout);

  // The chunks pipeline stage `stage` holds, in the schedule's numbering.
  std::vector<StageLayout> stage_chunks(int stage) const {
    return chunks_of_stage(chunks, layout.pp, stage, train.stage.placement);
  }
  std::vector<StageLayout> teacher_stage_chunks(int stage) const {
    return chunks_of_stage(teacher_chunks, layout.pp, stage, train.stage.placement);
  }
};

// The Trainer's settings from a run configuration, unchecked (TrainSetup::make checks them).
TrainConfig train_config(const RunConfig& c);

// The teacher that distill.teacher names (none: nothing to check) against the student, at no
// layout: a weights file whose meaning agrees (io/saved_meaning.h). TrainSetup::make calls it; a
// layout search calls it first, so a teacher no layout can serve is named, not searched past.
void check_teacher(const RunConfig& cfg);

}  // namespace dit
