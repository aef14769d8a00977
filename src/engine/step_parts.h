// The step parts a training setup asks for (engine/step_part.h): distillation from a teacher
// (engine/distill.h), learned pruning's block gates (engine/layer_gates.h) and its LoRA adapters of
// the block linears (layers/lora.h). Each is built from its settings in TrainConfig; the Trainer
// runs whichever the setup enables, in this order.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "engine/distill.h"
#include "engine/layer_gates.h"
#include "engine/step_part.h"
#include "engine/train_setup.h"
#include "layers/params.h"
#include "optim/zero.h"
#include "parallel/grid.h"

namespace dit {

// What a part is built against: this rank's backend, grid, setup and model stage.
struct PartContext {
  Backend* be = nullptr;
  ParallelContext* ctx = nullptr;
  const TrainSetup* setup = nullptr;
  DiTStage* model = nullptr;
  bool holds_output = false;  // this rank's stage computes the model output (the loss)
};

// The parts `setup.train` enables, in the order they run: distillation, gates, LoRA.
std::vector<std::unique_ptr<StepPart>> make_step_parts(const PartContext& pc);

// Knowledge distillation: the teacher beside each stage, the output KD (times output_weight) and
// the feature losses (times feature_weight at the step); the recipe's loss weighs target_weight.
class DistillPart final : public StepPart {
 public:
  explicit DistillPart(const PartContext& pc);
  void begin_step(const StepView& view, DiTPipelineHooks& hooks) override;
  StageCompanion* companion() override { return teacher_.get(); }
  double recipe_weight() const override { return settings_.target_weight; }
  void add_output_loss(const OutputLoss& o) override;
  std::vector<std::string> loss_names() const override { return {"kd", "feature"}; }
  void local_sums(double* sums) const override;
  std::vector<LossTerm> terms(const double* sums, double samples, const StepView& view) const override;
  std::size_t bytes() const override { return teacher_->bytes(); }

 private:
  Backend* be_;
  bool counts_output_, counts_features_;  // this rank adds the KD terms, the feature terms
  DistillSettings settings_;
  std::unique_ptr<TeacherStage> teacher_;
  std::int64_t samples_;           // per step on this dp rank: microbatches x micro_batch
  Buffer kd_terms_, feature_terms_;  // (samples, 2) output KD's MSE and VB; (samples) features summed over pairs
  std::map<int, Tensor> teacher_out_;  // the teacher's output, by microbatch, until its loss
};

// Learned pruning's gates: masks drawn per microbatch and block, dL/dm gathered in the backward,
// and the logits' update after the weights'.
class GatePart final : public StepPart {
 public:
  explicit GatePart(const PartContext& pc);
  const LayerGates& gates() const { return gates_; }
  void begin_step(const StepView& view, DiTPipelineHooks& hooks) override;
  void after_update(std::int64_t adam_step, double loss_scale) override;

 private:
  std::vector<BlockGate> block_gates(int mb, int chunk);
  ParallelContext* ctx_;
  Backend* be_;
  const DiTStage* model_;
  BatchPlan plan_;
  int depth_;
  bool counts_;  // this rank adds its dL/dm once per tp group (every tp rank under sequence parallelism)
  LayerGates gates_;
  Buffer grads_;  // (depth x microbatches, micro_batch) fp32: this step's dL/dm, block-major
  std::int64_t step_ = 0;
};

// Learned pruning's LoRA adapters of this stage's block linears: their gradients summed over tp,
// then AdamW (ZeRO over dp) at lora.lr, after the weights' update.
class LoraPart final : public StepPart {
 public:
  explicit LoraPart(const PartContext& pc);
  const ParamSet& adapters() const { return *adapters_; }
  void begin_step(const StepView& view, DiTPipelineHooks& hooks) override;
  void after_update(std::int64_t adam_step, double loss_scale) override;

 private:
  ParallelContext* ctx_;
  TrainConfig train_;
  std::unique_ptr<ParamSet> adapters_;
  std::unique_ptr<ZeroOptimizer> zero_;
  Buffer t_, u_;  // the adapters' shared (rows, r) scratch
};

}  // namespace dit
