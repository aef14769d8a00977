// Depth pruning of a trained DiT (TinyFusion, Fang et al. CVPR 2025): a student of depth N whose
// block j is the teacher's block keep[j], every other tensor the teacher's. The kept blocks are
// given (index) or chosen by a block-importance score on a calibration batch (score): ShortGPT's
// cosine similarity between a block's input and output (the most similar blocks change the
// residual stream least and go), or the rise of the training loss when the block alone is skipped.
// The last block is never dropped (the reference's topk runs over all blocks but the last).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/named.h"
#include "diffusion/objective.h"
#include "io/dataset.h"
#include "layers/dit_stage.h"

namespace dit {

// How the kept blocks are chosen: given, by a block score, or learned (engine/layer_gates.h).
enum class PruneMethod : std::uint8_t { Index, Score, Learned };
inline constexpr Named<PruneMethod> kPruneMethodNames[] = {
    {PruneMethod::Index, "index"}, {PruneMethod::Score, "score"}, {PruneMethod::Learned, "learned"}};
// The block-importance score of PruneMethod::Score.
//   cos   mean over samples and tokens of cos(x_in, x_out) over the hidden dim; drop the highest.
//   loss  the training loss with the block skipped (identity) minus the full model's; drop the lowest.
enum class BlockScore : std::uint8_t { Cos, Loss };
inline constexpr Named<BlockScore> kBlockScoreNames[] = {{BlockScore::Cos, "cos"}, {BlockScore::Loss, "loss"}};

// `keep` in model order (any order is accepted); throws unless it holds `depth` distinct blocks
// in [0, teacher_depth) (an invariant: io/prune_text.h's parse_keep_text names --keep first).
std::vector<int> checked_keep(const std::vector<int>& keep, int teacher_depth, int depth);
// The blocks kept at `depth` when (teacher depth - depth) blocks are dropped by their scores (one per
// teacher block): cos drops the highest, loss the lowest; ties drop the earlier block. The last
// block is never dropped. Model order.
std::vector<int> keep_by_scores(const std::vector<double>& scores, int depth, BlockScore score);

// "1,3,5": blocks as the command prints them and --keep takes them.
std::string blocks_text(const std::vector<int>& blocks);

// The student's model: the teacher's config at `depth`.
DiTConfig student_config(const DiTConfig& teacher, int depth);
// The student's tensors under its own names: "blocks.<j>.*" from the teacher's "blocks.<keep[j]>.*",
// everything else as it is. `teacher` holds every tensor of the teacher's whole model.
std::map<std::string, std::vector<float>> student_tensors(const DiTConfig& teacher_cfg,
                                                          const std::map<std::string, std::vector<float>>& teacher,
                                                          const std::vector<int>& keep);
// Every tensor of the whole model from a weights file (sealed, checksums verified, finite).
std::map<std::string, std::vector<float>> read_model_tensors(const std::string& path, const DiTConfig& cfg);
// Writes the student of the weights file `teacher_path` that keeps `keep` (model order) to `out`
// (save_weights: atomic, sealed), with the teacher's schedule length and objective and the
// provenance (kept_layers, teacher_depth, pruned_by) in /config.
void write_pruned_weights(const std::string& teacher_path, const std::string& out, const std::vector<int>& keep,
                          const std::string& pruned_by);

// ---- scores (prune_score.cpp) -------------------------------------------------------------------

// Fills the first stage's inputs (in.images, in.t, in.ids, allocated from `arena`) for rows
// [first, first + n) of a batch.
using StageFeed = std::function<void(std::int64_t first, std::int64_t n, StageInputs& in, Arena& arena)>;
// Per block of the whole model `model`, the mean over `rows` samples and every token of the cosine
// similarity between the block's input and output along the hidden dim (torch's
// cosine_similarity(dim=-1), eps 1e-8), in `batch`-row forwards.
std::vector<double> block_similarity(Backend& be, const DiTStage& model, std::int64_t rows, std::int64_t batch,
                                     const StageFeed& feed);

// A calibration batch: K samples of the dataset (the DataOrder permutation of `seed`, from
// position 0), each with a timestep drawn uniformly from its (seed, Timestep, 0, i) stream; the
// noise of sample i is the (seed, Noise, 0, i) stream, drawn on the backend. No label dropout.
struct Calibration {
  std::int64_t n = 0;
  std::uint64_t seed = 0;
  std::vector<float> x0;         // (n, C, H, W) data
  std::vector<std::int32_t> t;   // (n) ddpm schedule indices (0 for flow)
  std::vector<double> time;      // (n) flow: t in [0, 1) (0 noise, 1 data); empty for ddpm
  std::vector<std::int32_t> y;   // (n) labels
};
// The recipe the teacher was trained with: its objective and loss terms (the timestep
// distribution is not used: calibration draws uniformly) and its schedule's length.
struct ScoreRecipe {
  diffusion::TrainObjective objective;
  int diffusion_steps = 1000;
};
Calibration draw_calibration(const Dataset& data, const DiTConfig& cfg, const ScoreRecipe& recipe, std::int64_t n,
                             std::uint64_t seed);

struct BlockScores {
  std::vector<double> score;  // one per teacher block
  double full_loss = 0;       // loss only: the whole model's mean training loss on the batch
};
// The scores of every block of the whole model `teacher` on the calibration batch, as the model
// trains: its input is x_t = q_sample(x0, t, noise) (ddpm) or t x0 + (1 - t) noise (flow), at the
// model timesteps training feeds; the loss is the recipe's training loss.
BlockScores score_blocks(Backend& be, const DiTStage& teacher, const Calibration& cal, const ScoreRecipe& recipe,
                         BlockScore score);

}  // namespace dit
