// The training step as the official DiT train.py defines it: per microbatch, sample t and noise
// (keyed RNG), drop labels for guidance, forward, hybrid loss (MSE + VB), backward; then clip the
// global gradient norm, AdamW, EMA. Gradients are the mean over the global batch.
#pragma once

#include <memory>

#include "app/batch.h"
#include "backend/backend.h"
#include "diffusion/schedule.h"
#include "layers/dit_stage.h"
#include "optim/adamw.h"

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
  double ema_decay = 0.9999;
  bool ema_warmup = true;
  std::uint64_t seed = 0;
};

struct StepStats {
  std::int64_t step = 0;  // the step just taken (counting from 0)
  double loss = 0, mse = 0, vb = 0;  // means over the global batch
  double grad_norm = 0;              // before clipping
  double lr = 0;
};

class Trainer {
 public:
  Trainer(Backend& be, const DiTConfig& model, const TrainConfig& train, const Dataset& data);

  StepStats step();
  std::int64_t next_step() const { return step_; }
  DiTStage& model() { return *model_; }
  Optimizer& optimizer() { return *opt_; }
  const diffusion::Schedule& schedule() const { return schedule_; }

 private:
  Backend* be_;
  DiTConfig cfg_;
  TrainConfig train_;
  diffusion::Schedule schedule_;
  SelfComm self_;
  std::unique_ptr<DiTStage> model_;
  std::unique_ptr<Optimizer> opt_;
  std::unique_ptr<BatchSource> batches_;
  Arena saved_, scratch_;
  std::int64_t step_ = 0;
};

}  // namespace dit
