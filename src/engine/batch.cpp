// Deterministic training batches (see batch.h).
#include "engine/batch.h"

#include <numeric>

#include "core/error.h"
#include "core/philox.h"
#include "parallel/pipeline.h"

namespace dit {

BatchPlan BatchPlan::make(std::int64_t global_batch, int dp, int micro_batch) {
  // Invariants: TrainSetup::make names the keys when a run's batch does not split.
  DIT_CHECK(global_batch > 0 && dp > 0 && micro_batch > 0, "a batch of ", global_batch, " over dp ", dp,
            " in microbatches of ", micro_batch, ": all must be positive");
  DIT_CHECK(global_batch % (std::int64_t(dp) * micro_batch) == 0, "a batch of ", global_batch,
            " does not split over dp ", dp, " x microbatches of ", micro_batch);
  const std::int64_t microbatches = global_batch / (std::int64_t(dp) * micro_batch);
  DIT_CHECK(microbatches <= kMaxMicrobatches, "a batch of ", global_batch, " is ", microbatches,
            " microbatches per dp rank, at most ", kMaxMicrobatches, " fit a step");
  BatchPlan p;
  p.global_batch = global_batch;
  p.dp = dp;
  p.micro_batch = micro_batch;
  p.microbatches = static_cast<int>(global_batch / (std::int64_t(dp) * micro_batch));
  return p;
}

BatchSource::BatchSource(const Dataset& data, const diffusion::Schedule& schedule, BatchPlan plan,
                         std::uint64_t seed, double label_dropout, int num_classes,
                         const diffusion::TrainObjective& objective)
    : data_(&data), schedule_(&schedule), plan_(plan), seed_(seed),
      label_dropout_(label_dropout), num_classes_(num_classes), objective_(objective) {
  DIT_CHECK(data.num_classes() <= num_classes, "the dataset has ", data.num_classes(),
            " classes but the model only ", num_classes);
}

std::int64_t BatchSource::dataset_index(std::int64_t position) const {
  const std::int64_t n = data_->size();
  const std::int64_t epoch = position / n;
  std::lock_guard<std::mutex> lock(mu_);
  if (epoch != perm_epoch_) {
    perm_.resize(static_cast<std::size_t>(n));
    std::iota(perm_.begin(), perm_.end(), 0);
    Philox rng(seed_, RngPurpose::DataOrder, static_cast<std::uint64_t>(epoch), 0);
    for (std::int64_t i = n - 1; i > 0; --i) {  // Fisher-Yates
      const std::int64_t j = static_cast<std::int64_t>(rng.uniform_f64() * double(i + 1));
      std::swap(perm_[i], perm_[j]);  // j <= i since uniform_f64() < 1
    }
    perm_epoch_ = epoch;
  }
  return perm_[static_cast<std::size_t>(position % n)];
}

Microbatch BatchSource::get(std::int64_t step, int dp_rank, int mb) const {
  DIT_CHECK(dp_rank >= 0 && dp_rank < plan_.dp && mb >= 0 && mb < plan_.microbatches,
            "microbatch ", mb, " of dp rank ", dp_rank, " outside the plan");
  const std::int64_t per = data_->shape().numel();
  Microbatch b;
  b.n = plan_.micro_batch;
  b.first = plan_.first_position(step, dp_rank, mb);
  b.x_start.resize(static_cast<std::size_t>(b.n * per));
  for (std::int64_t i = 0; i < b.n; ++i) {
    const std::int64_t pos = b.first + i;
    int label = data_->get(dataset_index(pos), b.x_start.data() + i * per);
    const auto key_step = static_cast<std::uint64_t>(step), key = static_cast<std::uint64_t>(pos);
    Philox tr(seed_, RngPurpose::Timestep, key_step, key);
    const diffusion::DrawnTime dt = diffusion::draw_time(tr, objective_, schedule_->num_timesteps);
    b.t.push_back(static_cast<std::int32_t>(dt.index));
    if (objective_.objective == diffusion::Objective::Flow) b.time.push_back(dt.t);
    Philox drop(seed_, RngPurpose::LabelDrop, key_step, key);
    if (label_dropout_ > 0 && drop.uniform_f64() < label_dropout_) label = num_classes_;
    b.y.push_back(label);
  }
  return b;
}

}  // namespace dit
