// Learned depth pruning (TinyFusion's prune_by_learning, Fang et al. CVPR 2025). The teacher's
// blocks are grouped in runs of M, of which N are kept; every choice of N in a group has a logit.
// Each training step draws one choice per sample and group by hard Gumbel-softmax,
//   y = softmax((scaling x logits + G) / tau),  G = -log(-log U),  hard: one_hot(argmax y),
// and gates each block's residual, x = m block(x) + (1 - m) x, with m = 1 for the chosen blocks.
// The gradient reaches the logits through the soft y (straight-through):
//   dL/dm = sum over tokens and width of dL/dx_out (block(x) - x)         (DiTStage::backward)
//   dL/dy_c = sum over the group's blocks j of option_c[j] dL/dm_j
//   dL/dlogit_c = sum over samples of (scaling / tau) y_c (dL/dy_c - sum_k y_k dL/dy_k)
// tau and scaling move linearly over the steps (4 -> 0.1 and 1e2 by default). The logits train
// by AdamW (no weight decay) at their own learning rate; their EMA (decay 0.999) decides.
//
// Every rank draws the same noise for a sample: the Philox stream (seed, Gate, step, stream
// position), one uniform per choice of each group in turn. The logits are replicated (a few per
// group): each rank adds what its blocks and samples owe, one world all-reduce sums it, and
// every rank takes the same update.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "io/prune_text.h"
#include "parallel/comm.h"

namespace dit {

// Blocks [first, first + size) of the teacher, of which `keep` stay.
struct GateGroup {
  int first = 0, size = 0, keep = 0;
  bool operator==(const GateGroup&) const = default;
};

// Choices per group are capped: a group's logits are one row, and C(M, N) grows fast.
inline constexpr std::size_t kMaxGateChoices = 4096;

// The groups of io/prune_text.h's parse_groups_text (M blocks keeping N each, in order), placed
// on the teacher's blocks: they tile its depth and keep `depth` blocks in all.
std::vector<GateGroup> gate_groups(const std::vector<GroupSize>& sizes, int teacher_depth, int depth);
// The default when no groups are given: TinyFusion's 2 of every 4 generalised, groups of 2r
// blocks keeping 2 when r = teacher_depth / depth is whole and 2r tiles the depth, else of r
// keeping 1; empty when depth does not divide teacher_depth.
std::vector<GateGroup> default_gate_groups(int teacher_depth, int depth);
std::string groups_text(const std::vector<GateGroup>& groups);

struct GateSettings {
  std::vector<GateGroup> groups;  // empty: no gates
  double tau_start = 4.0, tau_end = 0.1;
  double scaling_start = 100.0, scaling_end = 100.0;
  double lr = 1e-3;          // the logits' AdamW learning rate
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double ema_decay = 0.999;  // of the logits; the EMA decides
  double init = 0.02;        // every logit's start (the reference's constant)
  bool enabled() const { return !groups.empty(); }
  // Linear from start at step 0 to end at the last step (step / max(steps - 1, 1)).
  double tau_at(std::int64_t step, std::int64_t steps) const;
  double scaling_at(std::int64_t step, std::int64_t steps) const;
};

class LayerGates {
 public:
  LayerGates(const GateSettings& s, std::uint64_t seed);
  const GateSettings& settings() const { return s_; }
  int depth() const { return depth_; }

  // Draws the masks of microbatch `mb` of step `step` (of `steps`): n samples at stream
  // positions [first, first + n). Idempotent within a step; begin_step forgets the last step's.
  void begin_step(std::int64_t step, std::int64_t steps);
  void sample(int mb, std::int64_t first, std::int64_t n);
  // Block b's masks for microbatch mb (n values, 0 or 1).
  const float* mask(int mb, int block) const;
  // Adds weight x dL/dlogits of microbatch mb from dm (depth x n, row b: dL/dm of block b's
  // samples; blocks this rank does not hold are zero).
  void backward(int mb, const float* dm, double weight);
  // Sums the logits' gradients over `world`, divides by `divisor` (the mean over the global batch),
  // and takes one AdamW step and one EMA step of the logits. The gradients reset.
  void update(Comm& world, double divisor);
  // The blocks the EMA logits choose (argmax per group), model order, and per group the choice's
  // probability softmax(scaling x ema).
  std::vector<int> decision() const;
  std::vector<double> confidence() const;
  // AdamW steps the logits took.
  std::int64_t updates() const { return t_; }
  // Every logit and its EMA, group by group (for tests and the final report).
  std::vector<double> logits() const;
  std::vector<double> ema_logits() const;
  // This rank's dL/dlogits added by backward since the last update (unreduced, undivided).
  std::vector<double> gradient() const;

 private:
  struct Group {
    GateGroup g;
    std::vector<std::vector<int>> options;  // per choice, the kept blocks' offsets in the group
    std::vector<double> logit, ema, m, v, grad;
  };
  struct Drawn {
    std::int64_t n = 0;
    std::vector<float> mask;                // (depth, n)
    std::vector<std::vector<double>> soft;  // per group: (n, choices) the soft y
  };
  GateSettings s_;
  std::uint64_t seed_;
  int depth_ = 0;
  std::vector<Group> groups_;
  std::int64_t step_ = -1, steps_ = 1;
  std::int64_t t_ = 0;  // AdamW updates taken
  std::map<int, Drawn> drawn_;
};

}  // namespace dit
