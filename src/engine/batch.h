// Training batches as a pure function of (seed, step, dp rank, microbatch): which samples, their
// timesteps and label dropout here; their noise on the backend from the same keys
// (Backend::philox_normal with RngPurpose::Noise, step, sample position). Every rank that needs a
// microbatch (pipeline stage 0 for the model input, the last stage for the loss) derives the same
// numbers without communication, the numbers do not depend on the layout, and a resumed run
// continues bit for bit.
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

#include "diffusion/noise_schedule.h"
#include "diffusion/objective.h"
#include "io/dataset.h"

namespace dit {

// How a global batch is split: global_batch = dp * micro_batch * microbatches.
struct BatchPlan {
  std::int64_t global_batch = 0;
  int dp = 1;
  int micro_batch = 0;
  int microbatches = 1;
  static BatchPlan make(std::int64_t global_batch, int dp, int micro_batch);  // validates
  // The training stream position of the first sample of microbatch `mb` of dp rank `dp_rank` at `step`.
  std::int64_t first_position(std::int64_t step, int dp_rank, int mb) const {
    return step * global_batch + (std::int64_t(dp_rank) * microbatches + mb) * micro_batch;
  }
};

// The host part of a microbatch. Sample i sits at position first + i of the training stream; its
// noise is stream (seed, Noise, step, first + i).
struct Microbatch {
  std::int64_t n = 0;
  std::int64_t first = 0;
  std::vector<float> x_start;     // (n, C, H, W)
  std::vector<std::int32_t> t;    // (n) diffusion timesteps (schedule indices; 0 for flow)
  std::vector<double> time;       // (n) flow: the continuous t in [0, 1] (0 noise, 1 data); else empty
  std::vector<std::int32_t> y;    // (n) labels after CFG dropout (num_classes = null)
};

class BatchSource {
 public:
  BatchSource(const Dataset& data, const diffusion::Schedule& schedule, BatchPlan plan,
              std::uint64_t seed, double label_dropout, int num_classes,
              const diffusion::TrainObjective& objective = {});
  const BatchPlan& plan() const { return plan_; }
  // The microbatch `mb` of dp rank `dp_rank` at training step `step` (counting from 0).
  Microbatch get(std::int64_t step, int dp_rank, int mb) const;
  // The dataset index at a stream position: a fresh seeded permutation per epoch.
  std::int64_t dataset_index(std::int64_t position) const;

 private:
  const Dataset* data_;
  const diffusion::Schedule* schedule_;
  BatchPlan plan_;
  std::uint64_t seed_;
  double label_dropout_;
  int num_classes_;
  diffusion::TrainObjective objective_;
  mutable std::mutex mu_;
  mutable std::int64_t perm_epoch_ = -1;
  mutable std::vector<std::int64_t> perm_;
};

}  // namespace dit
