// The training step as the official DiT train.py defines it, split over the rank grid: per
// microbatch, sample t (keyed RNG) and drop labels for guidance on the host, draw the noise and
// form x_t on the backend, forward through the pipeline, hybrid loss (MSE + VB) and its gradient
// on the backend of the last stage, backward; then ZeRO-1: reduce-scatter the grads over dp, clip
// the global norm, AdamW and EMA on the shard, all-gather. The loss and its gradients are means
// over the global batch, so every layout trains the same model. The host waits for the backend
// twice a step, whatever the microbatches and tensors: the norm's one reduction and, on the loss
// ranks, the per-sample loss terms at the end (Backend::host_syncs counts them).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "engine/batch.h"
#include "engine/read_ahead.h"
#include "engine/dit_pipeline.h"
#include "engine/loss_spike.h"
#include "engine/step_part.h"
#include "engine/train_setup.h"
#include "backend/backend.h"
#include "diffusion/noise_schedule.h"
#include "io/checkpoint.h"
#include "optim/loss_scale.h"
#include "optim/zero.h"
#include "parallel/grid.h"

namespace dit {

// Where one step's wall time went on this rank, in parts that add up to step_s (host clocks: on a
// GPU the communication parts are the host's time inside the calls, the device's own overlap is the
// trace's to show). `idle` is the time blocked on other ranks: pipeline receives and sends, and the
// wait for the slowest rank at the step's loss gather; run/monitor.h splits it into the pipeline
// bubble and exposed pp communication.
struct StepSplit {
  double compute = 0;    // the stage's own work: kernels and the host's work between them
  double tp = 0, dp = 0;  // inside tp and dp collectives (exposed: the caller waited that long)
  double idle = 0;       // blocked on other ranks (pipeline messages, the step's end)
  double data = 0;       // waiting for the next microbatch from the data reader
  double optimizer = 0;  // the update (clipping, AdamW, EMA), its dp traffic apart
};

// Bytes this rank sent per kind of communication during one step, and where its time went.
struct StepAccounting {
  std::uint64_t tp_bytes = 0, pp_bytes = 0, dp_bytes = 0;
  double step_s = 0, compute_s = 0, pp_wait_s = 0, optimizer_s = 0;
  double measured_bubble = 0;     // pp_wait / (pp_wait + compute) on this rank
  double theoretical_bubble = 0;  // at equal op times (pipeline_schedule.h)
  double op_f_s = 0, op_b_s = 0, op_w_s = 0;  // mean T_F, T_B (or fused backward), T_W per chunk
  std::size_t activation_bytes = 0;  // peak of the microbatch arenas
  std::uint64_t host_syncs = 0;      // times the host waited for the backend this step
  StepSplit split;                   // where step_s went, in parts that add up to it
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
  std::size_t host = 0;         // optim.offload = "cpu": the optimizer state and its staging in host memory
                                // (not in total(): the device's bytes; host_bytes in reports)
  std::size_t parts = 0;        // the step parts' own buffers (engine/step_part.h: StepPart::bytes), e.g. a
                                // distillation teacher's weights and its arena's peak (teacher_bytes in reports)
  std::size_t total() const {
    return params + grads + master + exp_avg + exp_avg_sq + ema + activations + workspace + parts;
  }
};

struct StepStats {
  std::int64_t step = 0;  // the step just taken (counting from 0)
  // Means over the global batch, on every rank: the step's loss, and the recipe's own loss and its
  // two terms, the MSE and the second: DDPM's learned-variance bound (vb) or flow's cosine term (cos).
  double loss = 0, recipe = 0, mse = 0, second = 0;
  // The step parts' terms (distillation: "kd", "feature"), each a mean over the global batch with its
  // weight; loss = recipe_weight x recipe + the sum of weight x value. Empty without parts' terms.
  std::vector<LossTerm> terms;
  double recipe_weight = 1;
  double grad_norm = 0;              // before clipping
  double lr = 0;
  int nonfinite_rank = -1;  // the lowest rank whose loss was NaN or Inf this step (the update skipped), or -1
  double loss_scale = 1;    // the fp16 loss scale this step ran with (1 otherwise)
  // The loss or the gradient norm was not finite (fp16: an overflow): the update was skipped.
  bool skipped = false;
  std::int64_t nonfinite_in_row = 0;       // skipped steps in a row, this one included
  std::int64_t nonfinite_loss_in_row = 0;  // of them, steps in a row whose loss was not finite
  // fp16: the gradients were not finite even at loss scale 1, so lowering the scale cannot help
  // (a diverged model, not an overflow); the caller should stop.
  bool nonfinite_at_scale_one = false;
  std::string spike;          // the loss spike's line (engine/loss_spike.h), or ""
  bool spike_skipped = false;  // train.skip_loss_spikes: its update was skipped
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
  // The training loop every run of the Trainer goes through: steps from next_step() to `steps`,
  // each handed to after(done, stats) (done counts from 1), which returns 0 to go on, or a code
  // that ends the loop and is returned. Returns 0 after the last step.
  using AfterStep = std::function<int(std::int64_t done, const StepStats& st)>;
  int train_to(std::int64_t steps, const AfterStep& after);
  // This stage's full state on the host (fp32 master weights, Adam moments, EMA; the ZeRO
  // shards all-gathered over dp), in the ParamSet's flat order.
  StageState state();
  // The part of it this rank writes to a checkpoint (io/checkpoint.h checkpoint_range), collective
  // over dp: with the state in host memory (the CPU backend, or offloaded) the optimizer's own
  // buffers, borrowed, and in `owned` the values past the shard of the tensors that start in it
  // (gathered from the next ranks: at most the largest tensor); else all of it gathered from the
  // dp ranks' shards into `owned` (about a shard, not the stage).
  StateView checkpoint_view(StageState& owned);
  // The flat elements restore() reads: this rank's ZeRO shard.
  FlatRange restore_range() const { return {zero_->shard_begin(), zero_->shard_begin() + zero_->shard_size()}; }
  // Continues from a state of this stage (any layout wrote it; holding at least restore_range())
  // after `steps_done` steps. Collective over dp: the other shards' parameters come from their owners.
  void restore(const StageState& s, std::int64_t steps_done, const LossScaleState& scaling = {});
  // fp16 dynamic loss scaling (off for fp32 and bf16: scale 1, nothing skipped).
  const LossScaler& loss_scaler() const { return scaler_; }
  // The model, its parameters up to date (ZeRO's gathers of the last step waited for).
  DiTStage& model() {
    zero_->settle();
    return *model_;
  }
  // The step part of type P (engine/step_parts.h) the setup enabled, or null.
  template <class P>
  const P* part() const {
    for (const auto& p : parts_)
      if (const P* found = dynamic_cast<const P*>(p.get())) return found;
    return nullptr;
  }
  ZeroOptimizer& optimizer() { return *zero_; }
  const diffusion::Schedule& noise_schedule() const { return noise_; }
  const BatchPlan& plan() const { return batches_->plan(); }
  // What this rank holds, with the peaks of the steps taken so far.
  MemoryAccount memory() const;

 private:
  // The four kinds' flat elements want_of(r) to each dp rank r (collective over dp; engine/global_tensors.h
  // gather_range): checkpoint_view's gathered part.
  StageState gather_state(const std::function<FlatRange(int)>& want_of);
  // What both ends of the pipeline need of a microbatch, on the backend (in its arena).
  struct DeviceBatch {
    Tensor x0, noise, t;  // (N, C, H, W) fp32, the same, (N) int32 rows of `coefs`
    Tensor coefs;         // the path's rows: the step's schedule table, or flow's (N, kNumLossCoefs)
  };
  const Microbatch& microbatch(int mb);
  const DeviceBatch& device_batch(int mb, Arena& arena);
  void upload(const Tensor& dst, const void* host, DType host_dtype);
  void inject_slow_layout() const;  // DIT_FAULT_SLOW_LAYOUT (trainer.cpp)
  void inject_nonfinite_gradient(std::int64_t step);
  std::vector<float> model_times(const Microbatch& b) const;
  void gather_losses(const Tensor& terms, const StepView& view, StepStats& st);
  // The pipeline hooks of one step: inputs on the first stage, the loss into `terms` on the last
  // (and the parts' hooks).
  DiTPipelineHooks step_hooks(const Tensor& terms, const StepView& view);
  // Writes dout: the recipe's loss (times the parts' recipe weight), then each part's own.
  void output_loss(int mb, const Tensor& out, const Tensor& dout, float grad_scale, const Tensor& terms, Arena& arena);

  Backend* be_;
  ParallelContext* ctx_;
  DiTConfig cfg_;
  TrainConfig train_;
  diffusion::Schedule noise_;  // the noise schedule (DDPM's betas; the loss kernels' table)
  std::unique_ptr<DiTStage> model_;
  std::unique_ptr<ZeroOptimizer> zero_;
  std::vector<std::unique_ptr<StepPart>> parts_;  // engine/step_parts.h: what the setup enables
  StageCompanion* companion_ = nullptr;           // the first part's companion, or null
  double recipe_weight_ = 1;                      // the product of the parts' recipe weights
  std::unique_ptr<BatchSource> batches_;
  std::unique_ptr<ReadAhead> read_ahead_;  // reads batches_ a step ahead (destroyed before it)
  std::unique_ptr<PipelineExecutor> executor_;
  std::int64_t step_ = 0;
  std::size_t workspace_peak_ = 0;
  bool stepped_ = false;  // this process has taken a step (the first one is slow)
  double data_wait_s_ = 0;  // this step's wait for microbatches from the reader
  std::int64_t nonfinite_loss_in_row_ = 0;  // not saved: a resume starts at 0, as the loss scaler's count
  LossScaler scaler_;
  LossSpikeWatch spikes_;  // train.loss_spike_z over the losses this process saw
  std::map<int, Microbatch> cache_;  // this step's microbatches, shared by first and last stage
  std::map<int, DeviceBatch> device_cache_;
  Buffer coefs_;  // (T, math::kNumLossCoefs) fp32: the schedule as the loss kernels read it
  Buffer terms_;  // (microbatches x micro_batch, 3) fp32: this step's per-sample loss terms
};

}  // namespace dit
