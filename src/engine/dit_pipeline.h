// The DiT side of the pipeline executor: one pipeline stage's slice of the model as a
// PipelineStage. What enters the first stage and what the last stage does with the model output
// are hooks, so training (loss), golden verification (a given cotangent) and sampling (forward
// only) share one executor.
#pragma once

#include <functional>
#include <map>
#include <vector>

#include "layers/dit_stage.h"
#include "parallel/pipeline.h"

namespace dit {

// Blocks [first, end) of each stage: balanced (stage s gets floor((s+1)L/pp) - floor(sL/pp)), or
// the given counts (e.g. 3,4,4,3). Every stage needs at least one block.
std::vector<StageLayout> partition_stages(const DiTConfig& cfg, int pp,
                                          const std::vector<int>& layers = {});
// With v virtual stages per rank: the pp * v model chunks in model order, balanced the same way
// (or layers, one count per model chunk). v = 1 is partition_stages.
std::vector<StageLayout> partition_chunks(const DiTConfig& cfg, int pp, int v,
                                          const std::vector<int>& layers = {});
// The chunks stage s holds, in the schedule's numbering: chunk c is model chunk c * pp + s, or
// under ZB-V's V chunk 0 is model chunk s and chunk 1 is 2 pp - 1 - s.
std::vector<StageLayout> chunks_of_stage(const std::vector<StageLayout>& model_chunks, int pp, int stage,
                                         ChunkPlacement placement = ChunkPlacement::Interleaved);

// A forward-only model run beside the stage's (distillation's teacher, engine/distill.h): its
// tensors travel with the stage's between stages (after them), it runs after the stage's forward
// of each microbatch and chunk, and it may give extra gradients of the stage's block outputs for
// that microbatch's backward.
class StageCompanion {
 public:
  virtual ~StageCompanion() = default;
  struct Output {
    std::vector<Tensor> send;             // to the next stage (not on the last)
    Tensor out;                           // last stage: the companion's model output
    std::vector<BlockGrad> block_grads;   // kept in the microbatch's arena until its backward
  };
  // Buffers for the companion's forward inputs (none where the stage's chunk has the embedders).
  virtual std::vector<Tensor> forward_inputs(int mb, int chunk, std::int64_t n, Arena& arena) = 0;
  // `in`: the stage's inputs (images, t, ids on the first stage); `inputs`: the companion's received
  // tensors; `acts`: the stage's activations of this microbatch.
  virtual Output forward(int mb, int chunk, const StageInputs& in, const std::vector<Tensor>& inputs,
                         const StageActs& acts, Arena& arena, Arena& scratch) = 0;
};

struct DiTPipelineHooks {
  // First stage: fill in.images (N, C, H, W), in.t (N) and in.ids (N) allocated from `arena`.
  std::function<void(int mb, StageInputs& in, Arena& arena)> make_inputs;
  // Last stage: sees the model output; returns dL/d output in `arena` (empty when forward only).
  std::function<Tensor(int mb, const Tensor& out, Arena& arena)> on_output;
  // Last stage, with a companion: sees the companion's output before on_output sees the model's.
  std::function<void(int mb, const Tensor& companion_out)> on_companion_output;
  // Optional: the block gates of a microbatch's forward through a chunk (learned pruning), one per
  // block of the chunk; their dmask tensors get dL/dm in the backward.
  std::function<std::vector<BlockGate>(int mb, int chunk)> block_gates;
  // First stage, optional: receives dL/d images.
  std::function<void(int mb, const Tensor& dimages)> on_input_grad;
};

// The one way a first stage is fed from host memory: in.t (N) fp32 model timesteps and in.ids (N)
// labels, allocated from `arena` and uploaded; with `images` (N, C, H, W) fp32 also in.images in
// the backend's compute dtype (training forms its images on the backend instead).
struct HostInputs {
  const float* images = nullptr;  // may be null: the caller fills in.images
  const float* t = nullptr;
  const std::int32_t* labels = nullptr;
};
void upload_stage_inputs(Backend& be, const DiTConfig& cfg, std::int64_t n, const HostInputs& host, StageInputs& in,
                         Arena& arena);

class DiTPipelineStage final : public PipelineStage {
 public:
  DiTPipelineStage(Backend& be, const DiTStage& stage, std::int64_t micro_batch, DiTPipelineHooks hooks,
                   StageCompanion* companion = nullptr);

  std::vector<Tensor> forward_inputs(int mb, int chunk, Arena& arena) override;
  std::vector<Tensor> forward(int mb, int chunk, const std::vector<Tensor>& inputs, Arena& arena) override;
  std::vector<Tensor> backward_inputs(int mb, int chunk, Arena& arena) override;
  std::vector<Tensor> backward(int mb, int chunk, const std::vector<Tensor>& grads, Arena& arena) override;
  // B: the fused backward with the linears' weight grads queued, their tensors kept in `arena`
  // (the microbatch's, held by the executor until W); W: the queued weight grads.
  std::vector<Tensor> backward_input(int mb, int chunk, const std::vector<Tensor>& grads, Arena& arena) override;
  void backward_weight(int mb, int chunk, Arena& arena) override;
  std::size_t scratch_peak_bytes() const { return scratch_.peak_bytes(); }
  // The step runs m microbatches through each chunk: a chunk's m-th backward (its m-th weight
  // backward, when they are deferred) completes its units' gradients (UnitResidency). 0: unknown.
  void expect_microbatches(int m) { microbatches_ = m; }

 private:
  std::vector<Tensor> run_backward(int mb, int chunk, const std::vector<Tensor>& grads, Arena& arena,
                                   const WeightSink& w);
  Shape x_shape() const;
  Shape c_shape() const;
  Backend* be_;
  const DiTStage* stage_;
  std::int64_t n_;
  DiTPipelineHooks hooks_;
  Arena scratch_;
  std::map<std::pair<int, int>, StageActs> acts_;  // by (chunk, microbatch)
  StageCompanion* companion_;
  std::map<int, Tensor> douts_;                     // by microbatch (the last chunk's)
  std::map<std::pair<int, int>, std::vector<BlockGrad>> block_grads_;  // the companion's, by (chunk, microbatch)
  std::map<std::pair<int, int>, std::vector<WeightGrad>> owed_;  // W still to run, by (chunk, microbatch)
  int microbatches_ = 0;
  std::map<int, int> backwards_, weights_;  // backward and weight-backward passes done, by chunk
};

}  // namespace dit
