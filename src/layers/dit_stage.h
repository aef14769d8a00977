// The slice of a DiT that one pipeline stage owns: a contiguous run of blocks, plus the embedders
// on the first stage and the final layer on the last; under interleaved 1F1B, several such runs
// (chunks), all in one ParamSet. Forward and backward of one microbatch through one chunk; between
// stages flow (x: N x T x D, c: N x D) forward and (dx, dc) backward. With one stage this is the
// whole model.
#pragma once

#include <memory>
#include <vector>

#include "layers/dit_block.h"
#include "layers/embed.h"
#include "layers/final_layer.h"
#include "parallel/pipeline_schedule.h"

namespace dit {

// One chunk of the model: what a stage owns without interleaving.
struct StageLayout {
  int first_block = 0, end_block = 0;  // blocks [first_block, end_block)
  bool has_embed = true, has_final = true;
  static StageLayout whole(const DiTConfig& cfg) { return {0, cfg.depth, true, true}; }
};

// How a stage trades memory for time and communication: activation recomputation per block and
// sequence parallelism (dit_block.h). Under sequence parallelism the (x, c) a stage receives and
// sends carry this rank's T/tp tokens of x; the embedders and the final layer run on all tokens
// (the stage splits x0 after the patch embedding and gathers x before the final layer).
struct StageOptions {
  Recompute recompute = Recompute::None;
  int recompute_blocks = 0;  // Full only: the first K blocks of each stage recompute; 0 = all
  bool sequence_parallel = false;
  // Which model chunks a rank's chunks are (pipeline_schedule.h): ZB-V's V, or interleaved.
  ChunkPlacement placement = ChunkPlacement::Interleaved;
  Gradients gradients = Gradients::Kept;  // None: forward only (no gradient buffers)
  // A stage that only runs forward (sampling, a distillation teacher): no gradient buffers, and each
  // block keeps its output alone, its insides in scratch (full recomputation's forward: the same
  // values, none of the memory a backward would read).
  static StageOptions forward_only(ChunkPlacement placement = ChunkPlacement::Interleaved) {
    StageOptions o;
    o.recompute = Recompute::Full;
    o.placement = placement;
    o.gradients = Gradients::None;
    return o;
  }
  // The block's Recompute mode for its index within the stage.
  Recompute mode_of(int i) const {
    return recompute == Recompute::Full && recompute_blocks > 0 && i >= recompute_blocks
               ? Recompute::None
               : recompute;
  }
};
// Throws when the options ask to recompute more blocks than some stage (with virtual stages: some
// chunk) has, or a count without full recomputation (TrainSetup::make names the keys first).
void check_stage_options(const StageOptions& opt, const std::vector<StageLayout>& stages);

// A gate on one block's residual (learned pruning, engine/layer_gates.h): per sample n,
// x_out = m_n block(x) + (1 - m_n) x, and the backward writes dL/dm_n.
struct BlockGate {
  const float* mask = nullptr;  // host: the microbatch's N values (0 or 1 when hard; any in [0, 1])
  Tensor dmask;                 // (N) fp32: gets dL/dm (under sequence parallelism, this rank's tokens' share)
};

// Inputs of one microbatch: images/t/ids on the first stage, (x, c) from the previous otherwise.
struct StageInputs {
  Tensor images, t, ids;
  Tensor x, c;
  std::vector<BlockGate> gates;  // empty, or one per block of the chunk
};

// Everything one microbatch keeps between its forward and its backward on this stage.
struct StageActs {
  EmbedActs embed;
  std::vector<BlockActs> blocks;
  FinalActs final;
  Tensor x_in, c;  // (N, T, D), (N, D) as they entered the blocks
  Tensor silu_c;   // (N, D)
  std::vector<BlockGate> gates;  // as the inputs gave them
  std::vector<Tensor> ungated;   // gated blocks: block(x) before the gate (x_out is the gated stream)
  Tensor x_out() const { return blocks.empty() ? x_in : blocks.back().x_out; }
};

// An extra gradient of one block's output, added to the residual stream's before that block's
// backward (a loss on a hidden state: distillation's feature loss).
struct BlockGrad {
  int block = 0;  // chunk-local index
  Tensor dx;      // (N, T, D) like the block's x_out
};

// Where a stage's parameters and gradients come and go when data parallelism shards them (ZeRO-2
// and -3, optim/zero.h). A stage's units are the embedders, each block and the final layer of each
// chunk, in the flat buffers' order (DiTStage::units); the stage calls these around each unit it runs.
class UnitResidency {
 public:
  virtual ~UnitResidency() = default;
  enum class Pass : std::uint8_t { Forward, Backward };
  // Its parameters are needed now (backward: and its gradients); `next` is the unit the pass runs
  // after it (-1: none), whose parameters may be fetched meanwhile.
  virtual void enter(int unit, Pass pass, int next) = 0;
  virtual void leave(int unit, Pass pass) = 0;  // done with its parameters for now
  virtual void gradients_final(int unit) = 0;   // the step's last contribution to its gradients is in
};

// Gradients flowing out of / into a stage's backward.
struct StageGrads {
  bool last = false;  // the chunk's last backward of the step: each unit's gradients are final after its own
  Tensor dout;    // last stage: dL/d model output (N, C_out, H, W)
  Tensor dx, dc;  // on entry dL/d(x, c) of this stage's outputs; on return, of its inputs
                  // (updated in place). On the last stage they are output buffers only.
  Tensor dimages; // first stage, optional: dL/d images
  std::vector<BlockGrad> block_grads;  // optional: extra dL/d x_out of blocks of this chunk
};

class DiTStage {
 public:
  // pad_multiple: the flat parameter buffers are padded to a multiple of it (the dp size, so
  // ZeRO shards are equal).
  // chunks: this rank's model chunks in the order the schedule numbers them (one without
  // interleaving).
  DiTStage(Backend& be, const DiTConfig& cfg, std::vector<StageLayout> chunks, Comm& tp,
           std::int64_t pad_multiple = 1, StageOptions options = {});
  DiTStage(Backend& be, const DiTConfig& cfg, StageLayout layout, Comm& tp,
           std::int64_t pad_multiple = 1, StageOptions options = {})
      : DiTStage(be, cfg, std::vector<StageLayout>{layout}, tp, pad_multiple, options) {}
  static std::vector<ParamSpec> declare(const DiTConfig& cfg, const StageLayout& layout);
  static std::vector<ParamSpec> declare(const DiTConfig& cfg, const std::vector<StageLayout>& chunks);

  // The flat ranges of this stage's units (UnitResidency), which tile [0, params().padded_numel()).
  const std::vector<FlatRange>& units() const { return units_; }
  // Under ZeRO-2/3 the optimizer follows the units the stage runs (null: every parameter stays).
  void set_residency(UnitResidency* r) { residency_ = r; }
  // After the deferred weight gradients (zero-bubble W) of a chunk's last microbatch: its units'
  // gradients are final.
  void gradients_final(int chunk) const;
  ParamSet& params() { return *params_; }
  const ParamSet& params() const { return *params_; }
  // Attaches LoRA adapters to every block linear of this stage (layers/lora.h): `lora` holds them
  // (declare_lora of params()), s = alpha / r, t and u (max_rows, r) scratch in the compute dtype.
  void attach_lora(const ParamSet& lora, float scale, const Tensor& t, const Tensor& u);
  const DiTConfig& config() const { return cfg_; }
  int chunks() const { return static_cast<int>(chunks_.size()); }
  const StageLayout& layout(int chunk = 0) const { return chunks_.at(chunk).layout; }
  std::vector<StageLayout> layouts() const;  // every chunk's, in chunk order
  const StageOptions& options() const { return options_; }
  // Tokens of x this rank holds between blocks and stages: T, or T/tp with sequence parallelism.
  std::int64_t local_tokens() const;
  const Embedders* embedders() const { return chunks_.front().embed.get(); }

  StageActs forward(const StageInputs& in, Arena& saved, Arena& scratch, int chunk = 0) const;
  // Parameter gradients accumulate into params().grad(...).
  // With a deferring `w` this is B: the linears' weight grads are queued for run_weight_grads
  // (linear.h), reading tensors from w's kept arena; B then W adds the bits of the fused backward.
  void backward(const StageActs& acts, StageGrads& g, Arena& scratch, int chunk = 0,
                const WeightSink& w = {}) const;

 private:
  void gate_block(const float* mask, BlockActs& b, std::vector<Tensor>& ungated, Arena& saved) const;
  Tensor gate_backward(const BlockGate& gate, const Tensor& x_in, const Tensor& ungated, const Tensor& dx,
                       Arena& scratch) const;
  struct Chunk {
    StageLayout layout;
    std::unique_ptr<Embedders> embed;
    std::vector<DiTBlock> blocks;
    std::unique_ptr<FinalLayer> final;
    int first_unit = 0;  // the units of the embedders (if any), the blocks, the final layer (if any)
    int block_unit(std::size_t i) const { return first_unit + (embed ? 1 : 0) + static_cast<int>(i); }
    int final_unit() const { return block_unit(blocks.size()); }
    int end_unit() const { return final_unit() + (final ? 1 : 0); }
  };
  // Before a unit of chunk `ch` runs in `pass` (units run in order forward, in reverse backward).
  void enter(const Chunk& ch, int unit, UnitResidency::Pass pass) const {
    if (!residency_) return;
    const int next = pass == UnitResidency::Pass::Forward ? unit + 1 : unit - 1;
    residency_->enter(unit, pass, next >= ch.first_unit && next < ch.end_unit() ? next : -1);
  }
  // After a unit's forward, or its backward (with `last` and an undeferred weight backward, its
  // gradients are then final).
  void leave(int unit, UnitResidency::Pass pass, bool grads_final = false) const {
    if (!residency_) return;
    residency_->leave(unit, pass);
    if (grads_final) residency_->gradients_final(unit);
  }
  Backend* be_;
  DiTConfig cfg_;
  StageOptions options_;
  Comm* tp_;
  std::unique_ptr<ParamSet> params_;
  std::vector<Chunk> chunks_;
  std::vector<FlatRange> units_;
  UnitResidency* residency_ = nullptr;
};

}  // namespace dit
