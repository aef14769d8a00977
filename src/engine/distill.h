// Knowledge distillation from a teacher DiT (TinyFusion's masked KD, Fang et al. 2025): the teacher
// runs forward only, on the student's layout, beside every pipeline stage, and the step's loss is
//   output_weight x KD(out, teacher out) + target_weight x the recipe's loss
//   + feature_weight(step) x the mean over feature pairs of the masked feature loss,
// with KD = MSE of the predictions plus, when both learn the variance, the VB term of the student
// against the teacher's posterior (math.h OutputKdLoss), and the feature loss between the
// output of student block i and teacher block j, each with its values farther than mask_sigma
// standard deviations from the sample's mean zeroed (math.h FeatureKdLoss).
//
// Placement. The teacher is tp-sharded as the student (its heads and MLP split by the same tp) and
// split into model chunks aligned with the student's: chunk c holds every teacher block paired with
// a student block of chunk c, its boundaries otherwise as balanced as the pairs allow
// (teacher_chunks). A stage sends the teacher's (x, c) with the student's. Its weights live in
// their own ParamSet: never in the optimizer, the EMA or a checkpoint. Under ZeRO-3 they are
// sharded over dp the same way (optim/zero.h UnitGather): each rank keeps 1/dp of them and a unit's
// are gathered for its forward and handed back after, the next fetched meanwhile with overlap; the
// gathered values are the loaded ones, so the teacher's outputs are the same bits. Its forward keeps nothing
// past its use: each microbatch's teacher activations live in one arena, rewound after the
// feature losses are taken and its outputs copied out.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/dit_pipeline.h"
#include "io/config.h"
#include "layers/dit_config.h"
#include "optim/zero.h"

namespace dit {

// The feature pairs: student block `student` learns teacher block `teacher`'s output.
struct FeaturePair {
  int student = 0, teacher = 0;
  bool operator==(const FeaturePair&) const = default;
};

struct DistillSettings {
  std::string teacher;  // the teacher's weights file; "" = no distillation
  DiTConfig teacher_model;
  double output_weight = 0.9, target_weight = 0.1, feature_weight = 0.01;
  FeatureDecay feature_decay = FeatureDecay::Linear;
  double mask_sigma = 2.0;
  std::vector<FeaturePair> pairs;  // resolved (never empty when feature_weight > 0)
  bool enabled() const { return !teacher.empty(); }
  // feature_weight at `step` of `steps`: linear to 0 at the last step (TinyFusion's per-epoch
  // 1 - epoch / (epochs - 1), per step), or constant.
  double feature_weight_at(std::int64_t step, std::int64_t steps) const;
};

// The default pairs. Without kept layers: student block i with teacher block
// floor((i + 1) T / S) - 1 (TinyFusion's 2i + 1 when T = 2S). With `kept` (the teacher block each
// student block was pruned from, as `dit_mp prune` records it): student block i with the teacher
// block whose output feeds the teacher's next kept block, kept[i + 1] - 1 (the last: T - 1).
std::vector<FeaturePair> default_feature_pairs(int student_depth, int teacher_depth, const std::vector<int>& kept = {});

// The distillation settings of a run configuration with the teacher's model, checked: pairs lie
// inside both depths, one per student block, and pair models of equal width (that the teacher
// means what the student means, its data, recipe, sigma and patch, is io/saved_meaning.h's check,
// made before; TrainSetup::make names the [distill] keys first). `kept`: see default_feature_pairs.
DistillSettings distill_settings(const RunConfig& cfg, const DiTConfig& teacher, const std::vector<int>& kept = {});

// Whether some split of the teacher gives each chunk of the student every teacher block paired
// with one of its blocks (no pairs crossing a stage boundary in opposite order); and when not, a
// split of the student's blocks (counts per chunk) that would serve, or none (TrainSetup::make
// names the keys with them).
bool teacher_fits(const DiTConfig& teacher, const std::vector<StageLayout>& student,
                  const std::vector<FeaturePair>& pairs);
std::vector<int> serving_student_split(const DiTConfig& teacher, const std::vector<StageLayout>& student,
                                       const std::vector<FeaturePair>& pairs);
// The teacher's model chunks beside the student's (in model order): chunk c has every teacher
// block paired with a student block of chunk c. Throws unless teacher_fits.
std::vector<StageLayout> teacher_chunks(const DiTConfig& teacher, const std::vector<StageLayout>& student,
                                        const std::vector<FeaturePair>& pairs);

// One rank's teacher: its chunks of the teacher, its weights, and the feature losses of the pairs
// that live on this stage.
class TeacherStage final : public StageCompanion {
 public:
  // chunks: this rank's teacher chunks, in the schedule's numbering (as the student's); student:
  // the student's stage (for its block numbering and options). `shard_over`: the dp communicator
  // to shard the weights over (ZeRO-3), or null to keep them whole; `prefetch`: fetch a unit's
  // weights while the one before runs.
  TeacherStage(Backend& be, const DiTConfig& teacher, std::vector<StageLayout> chunks, Comm& tp,
               const DiTStage& student, const DistillSettings& settings, Comm* shard_over = nullptr,
               bool prefetch = false);
  // Reads the teacher's weights (every rank, keeping its slice, and of that its dp shard when
  // sharded): errors name the file.
  void load(const std::string& path);
  // This step's gradient scale of the feature losses (the loss seed x feature_weight / pairs) and
  // where their per-sample values add: (microbatches x micro_batch) fp32.
  void begin_step(float feature_grad_scale, const Tensor& feature_terms) {
    grad_scale_ = feature_grad_scale;
    terms_ = feature_terms;
  }
  const DiTStage& model() const { return *model_; }
  // What the teacher holds on this rank: its weights (sharded: the most held at once) and the peak
  // of its activation arena.
  std::size_t bytes() const {
    return (gather_ ? gather_->peak_bytes() : model_->params().flat_values().bytes()) + acts_.peak_bytes();
  }

  std::vector<Tensor> forward_inputs(int mb, int chunk, std::int64_t n, Arena& arena) override;
  Output forward(int mb, int chunk, const StageInputs& in, const std::vector<Tensor>& inputs,
                 const StageActs& student_acts, Arena& arena, Arena& scratch) override;

 private:
  Backend* be_;
  Comm* tp_;
  const DiTStage* student_;
  DistillSettings settings_;
  std::unique_ptr<DiTStage> model_;
  std::unique_ptr<UnitGather> gather_;  // sharded over dp, or null
  Arena acts_;  // one microbatch's teacher activations, rewound after each forward
  float grad_scale_ = 0;
  Tensor terms_;
};

}  // namespace dit
