// The seam through which a feature joins the training step, the step-level twin of the stage-level
// StageCompanion: a StepPart hooks into the pipeline's forward and backward, adds loss terms by
// name, acts after the optimizer's update, and says what memory it holds. Distillation (its
// teacher and its losses), learned pruning's block gates and its LoRA adapters are parts
// (engine/step_parts.h); the Trainer knows none of them by name.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "engine/batch.h"
#include "engine/dit_pipeline.h"

namespace dit {

// A named term of the step's loss: its mean over the global batch and its weight in the total.
struct LossTerm {
  std::string name;
  double value = 0, weight = 0;
};

// What a part sees of the step being taken.
struct StepView {
  std::int64_t step = 0, steps = 0;  // the step (counting from 0) and the run's steps
  const BatchPlan* plan = nullptr;
  float grad_scale = 1;  // the backward's scale of one microbatch's mean loss (loss scale / microbatches)
};

// The last stage's output of microbatch `mb` and what its loss reads, on the backend.
struct OutputLoss {
  int mb = 0;
  Tensor out, dout;            // the model's output and dL/d output, which the recipe's loss wrote
  Tensor x0, noise, t, coefs;  // the microbatch's data, noise, schedule rows and path coefficients
  math::LossKind kind;
  float grad_scale = 1;        // the step's, times nothing: a part weights its own term
};

class StepPart {
 public:
  virtual ~StepPart() = default;
  // Clears what the last step left (gradients, per-sample buffers); called before the pipeline runs.
  virtual void begin_step(const StepView& view, DiTPipelineHooks& hooks) = 0;
  // A forward-only model beside each pipeline stage (distillation's teacher), or null.
  virtual StageCompanion* companion() { return nullptr; }
  // The weight of the recipe's own loss in the step's total (1 unless a part re-weights it).
  virtual double recipe_weight() const { return 1; }
  // Last stage: adds the part's loss of one microbatch's output to dout.
  virtual void add_output_loss(const OutputLoss&) {}
  // The names of the part's loss terms, in the order local_sums writes them (the same on every rank).
  virtual std::vector<std::string> loss_names() const { return {}; }
  // This rank's per-sample sums of the terms (zeros where it holds none), one per name.
  virtual void local_sums(double* sums) const { (void)sums; }
  // The terms from their sums over the global batch of `samples` images, weighted for the total.
  virtual std::vector<LossTerm> terms(const double* sums, double samples, const StepView& view) const {
    (void)sums, (void)samples, (void)view;
    return {};
  }
  // After the optimizer's update of the weights, when it was applied (a finite gradient).
  virtual void after_update(std::int64_t adam_step, double loss_scale) { (void)adam_step, (void)loss_scale; }
  // The bytes it holds on this rank (weights, buffers, peaks of its arenas).
  virtual std::size_t bytes() const { return 0; }
};

}  // namespace dit
