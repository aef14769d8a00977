// The training step as the official DiT train.py defines it, split over the rank grid: per
// microbatch, sample t (keyed RNG) and drop labels for guidance on the host, draw the noise and
// form x_t on the backend, forward through the pipeline, hybrid loss (MSE + VB) and its gradient
// on the backend of the last stage, backward; then ZeRO-1: reduce-scatter the grads over dp, clip
// the global norm, AdamW and EMA on the shard, all-gather. The loss and its gradients are means
// over the global batch, so every layout trains the same model. The host waits for the backend
// twice a step, whatever the microbatches and tensors: the norm's one reduction and, on the loss
// ranks, the per-sample loss terms at the end (Backend::host_syncs counts them).
#pragma once

#include <map>
#include <memory>

#include "engine/batch.h"
#include "engine/dit_pipeline.h"
#include "engine/distill.h"
#include "engine/train_setup.h"
#include "backend/backend.h"
#include "diffusion/noise_schedule.h"
#include "io/checkpoint.h"
#include "optim/loss_scale.h"
#include "optim/zero.h"
#include "parallel/grid.h"

namespace dit {

// Bytes this rank sent per kind of communication during one step, and where its time went.
struct StepAccounting {
  std::uint64_t tp_bytes = 0, pp_bytes = 0, dp_bytes = 0;
  double step_s = 0, compute_s = 0, pp_wait_s = 0, optimizer_s = 0;
  double measured_bubble = 0;     // pp_wait / (pp_wait + compute) on this rank
  double theoretical_bubble = 0;  // at equal op times (pipeline_schedule.h)
  double op_f_s = 0, op_b_s = 0, op_w_s = 0;  // mean T_F, T_B (or fused backward), T_W per chunk
  std::size_t activation_bytes = 0;  // peak of the microbatch arenas
  std::uint64_t host_syncs = 0;      // times the host waited for the backend this step
};

// The bytes one rank holds, by category: what a run reports in accounting.json and what
// `dit_mp plan` predicts, both read from the Trainer's own buffers and arenas.
struct MemoryAccount {
  std::size_t params = 0, grads = 0;                  // flat buffers in the compute dtype
  std::size_t master = 0;                             // fp32 master shard (16-bit runs only)
  std::size_t exp_avg = 0, exp_avg_sq = 0, ema = 0;  // fp32 ZeRO shards
  std::size_t activations = 0;  // peak of the microbatch arenas (message buffers included)
  std::size_t messages = 0;     // peak of the pipeline receive buffers held at once
  std::size_t workspace = 0;    // peak of the scratch arena (kernel temporaries, recomputation) and the
                                // backend's own workspace (the composed attention's score tiles)
  std::size_t teacher = 0;      // distillation: the teacher's weights and its activation arena's peak
  std::size_t total() const {
    return params + grads + master + exp_avg + exp_avg_sq + ema + activations + workspace + teacher;
  }
};

struct StepStats {
  std::int64_t step = 0;  // the step just taken (counting from 0)
  double loss = 0, mse = 0, vb = 0;  // means over the global batch, on every rank
  // Distillation (engine/distill.h), means over the global batch: the recipe's own loss, the output
  // KD (its MSE and VB terms) and the feature loss (mean over the pairs); loss is their weighted sum.
  bool distilled = false;
  double target = 0, kd = 0, feature = 0, feature_weight = 0;
  double grad_norm = 0;              // before clipping
  double lr = 0;
  int nonfinite_rank = -1;  // the lowest rank whose loss was NaN or Inf this step, or -1
  double loss_scale = 1;    // the fp16 loss scale this step ran with (1 otherwise)
  bool skipped = false;     // the gradient norm was not finite (fp16: an overflow): the update was skipped
  std::int64_t nonfinite_in_row = 0;  // skipped steps in a row, this one included
  // fp16: the gradients were not finite even at loss scale 1, so lowering the scale cannot help
  // (a diverged model, not an overflow); the caller should stop.
  bool nonfinite_at_scale_one = false;
  StepAccounting acct;
};

class Trainer {
 public:
  // Trains as `setup` says (TrainSetup::make checked it) on this rank's stage of ctx's layout.
  Trainer(Backend& be, ParallelContext& ctx, const TrainSetup& setup, const Dataset& data);
  // The same after TrainSetup::make(model, train, ctx.layout).
  Trainer(Backend& be, ParallelContext& ctx, const DiTConfig& model, const TrainConfig& train,
          const Dataset& data);

  StepStats step();
  std::int64_t next_step() const { return step_; }
  // This stage's full state on the host (fp32 master weights, Adam moments, EMA; the ZeRO
  // shards all-gathered over dp), in the ParamSet's flat order: what a checkpoint holds.
  StageState state();
  // Continues from a state of this stage (any layout wrote it) after `steps_done` steps.
  void restore(const StageState& s, std::int64_t steps_done, const LossScaleState& scaling = {});
  // fp16 dynamic loss scaling (off for fp32 and bf16: scale 1, nothing skipped).
  const LossScaler& loss_scaler() const { return scaler_; }
  DiTStage& model() { return *model_; }
  // Learned pruning's gates (TrainConfig::gates), or null.
  const LayerGates* gates() const { return gates_.get(); }
  // Learned pruning's LoRA adapters of this stage's block linears (TrainConfig::lora), or null.
  const ParamSet* lora() const { return lora_.get(); }
  ZeroOptimizer& optimizer() { return *zero_; }
  const diffusion::Schedule& schedule() const { return schedule_; }
  const BatchPlan& plan() const { return batches_->plan(); }
  // What this rank holds, with the peaks of the steps taken so far.
  MemoryAccount memory() const;

 private:
  // What both ends of the pipeline need of a microbatch, on the backend (in its arena).
  struct DeviceBatch {
    Tensor x0, noise, t;  // (N, C, H, W) fp32, the same, (N) int32 rows of `coefs`
    Tensor coefs;         // the path's rows: the step's schedule table, or flow's (N, kNumLossCoefs)
  };
  const Microbatch& microbatch(int mb);
  const DeviceBatch& device_batch(int mb, Arena& arena);
  void upload(const Tensor& dst, const void* host, DType host_dtype);
  void inject_nonfinite_gradient(std::int64_t step);
  std::vector<float> model_times(const Microbatch& b) const;
  void gather_losses(const Tensor& terms, StepStats& st);
  // The pipeline hooks of one step: inputs on the first stage, the loss (seed: its gradient's
  // scale) into `terms` on the last, the teacher's outputs when distilling.
  DiTPipelineHooks step_hooks(const Tensor& terms, float seed);
  // Writes dout: the recipe's loss (times distill.target_weight and the output KD when distilling).
  void output_loss(int mb, const Tensor& out, const Tensor& dout, float seed, const Tensor& terms, Arena& arena);
  // Learned pruning: the gates of microbatch mb through this rank's chunk; after the step's
  // backward, their logits' update from the step's dL/dm.
  std::vector<BlockGate> block_gates(int mb, int chunk);
  void update_gates(double loss_scale);
  // LoRA: sums the whole factors' partial gradients over tp, then AdamW (ZeRO over dp) at lora.lr.
  void update_lora(std::int64_t adam_step, double loss_scale);

  Backend* be_;
  ParallelContext* ctx_;
  DiTConfig cfg_;
  TrainConfig train_;
  diffusion::Schedule schedule_;
  std::unique_ptr<DiTStage> model_;
  std::unique_ptr<TeacherStage> teacher_;  // distillation's, forward only; null without [distill]
  std::unique_ptr<ZeroOptimizer> zero_;
  std::unique_ptr<BatchSource> batches_;
  std::unique_ptr<PipelineExecutor> executor_;
  std::int64_t step_ = 0;
  std::size_t workspace_peak_ = 0;
  bool stepped_ = false;  // this process has taken a step (the first one is slow)
  LossScaler scaler_;
  std::map<int, Microbatch> cache_;  // this step's microbatches, shared by first and last stage
  std::map<int, DeviceBatch> device_cache_;
  Buffer coefs_;  // (T, math::kNumLossCoefs) fp32: the schedule as the loss kernels read it
  Buffer terms_;  // (microbatches x micro_batch, 3) fp32: this step's per-sample loss terms
  Buffer kd_terms_, feature_terms_;  // distillation: (.., 2) output KD terms, (..) feature losses summed over pairs
  std::unique_ptr<LayerGates> gates_;  // learned pruning's; null otherwise
  Buffer gate_grads_;  // (depth x microbatches, micro_batch) fp32: this step's dL/dm, block-major
  std::unique_ptr<ParamSet> lora_;           // learned pruning's adapters; null otherwise
  std::unique_ptr<ZeroOptimizer> lora_zero_;
  Buffer lora_t_, lora_u_;                   // the adapters' shared (rows, r) scratch
  std::map<int, Tensor> teacher_out_;  // distillation: the teacher's output, by microbatch, until its loss
};

}  // namespace dit
