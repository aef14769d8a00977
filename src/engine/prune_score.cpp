// Block-importance scores of depth pruning on a calibration batch (see prune.h).
#include "engine/prune.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "core/philox.h"
#include "diffusion/losses.h"
#include "engine/batch.h"
#include "engine/dit_pipeline.h"
#include "parallel/comm.h"

namespace dit {

namespace {

std::vector<float> to_host(Backend& be, const Tensor& t) {
  std::vector<float> h(static_cast<std::size_t>(t.numel()));
  be.copy(Tensor{h.data(), DType::F32, t.shape, Device::Host}, t);
  return h;
}

// Sum over rows of cos(a_r, b_r) for (R, D) host rows, as torch's cosine_similarity:
// <a, b> / sqrt(max(|a|^2 |b|^2, eps^2)), eps = 1e-8, in double.
double cosine_sum(const std::vector<float>& a, const std::vector<float>& b, std::int64_t d) {
  const double eps = 1e-8;
  double sum = 0;
  for (std::size_t r = 0; r < a.size() / static_cast<std::size_t>(d); ++r) {
    double ab = 0, aa = 0, bb = 0;
    for (std::int64_t k = 0; k < d; ++k) {
      const double x = a[r * d + k], y = b[r * d + k];
      ab += x * y, aa += x * x, bb += y * y;
    }
    sum += ab / std::sqrt(std::max(aa * bb, eps * eps));
  }
  return sum;
}

// The model's output for one batch, through its chunks in order (the embedders in the first, the
// final layer in the last): a whole model, or one with a block left out.
StageActs forward_chunks(const DiTStage& model, StageInputs in, Arena& saved, Arena& scratch) {
  StageActs a;
  for (int c = 0; c < model.chunks(); ++c) {
    a = model.forward(in, saved, scratch, c);
    in.x = a.x_out();
    in.c = a.c;
  }
  return a;
}

// The calibration batch on the backend, as Trainer::device_batch forms a training microbatch.
struct DeviceRows {
  Tensor x0, noise, t, coefs;  // data and noise (n, C, H, W) fp32, t (n) rows of coefs
};

class CalibrationFeed {
 public:
  CalibrationFeed(Backend& be, const DiTConfig& cfg, const Calibration& cal, const ScoreRecipe& recipe)
      : be_(be), cfg_(cfg), cal_(cal), flow_(recipe.objective.objective == diffusion::Objective::Flow),
        schedule_(diffusion::create_diffusion({"", cfg.learn_sigma, recipe.diffusion_steps})),
        table_(diffusion::loss_coef_table(schedule_, recipe.objective.weighting)) {}

  DeviceRows rows(std::int64_t first, std::int64_t n, Arena& arena) const {
    DeviceRows d;
    const std::int64_t per = cfg_.in_channels * std::int64_t(cfg_.input_size) * cfg_.input_size;
    d.x0 = arena.tensor({n, cfg_.in_channels, cfg_.input_size, cfg_.input_size}, DType::F32);
    upload(d.x0, cal_.x0.data() + first * per, DType::F32);
    d.noise = arena.tensor(d.x0.shape, DType::F32);
    be_.philox_normal(cal_.seed, static_cast<std::uint32_t>(RngPurpose::Noise), 0, static_cast<std::uint64_t>(first),
                      d.noise.view({n, per}));
    d.t = arena.tensor({n}, DType::I32);
    if (!flow_) {
      upload(d.t, cal_.t.data() + first, DType::I32);
      d.coefs = arena.tensor({schedule_.num_timesteps, math::kNumLossCoefs}, DType::F32);
      upload(d.coefs, table_.data(), DType::F32);
    } else {
      std::vector<std::int32_t> row(static_cast<std::size_t>(n));
      for (std::int64_t i = 0; i < n; ++i) row[i] = static_cast<std::int32_t>(i);
      upload(d.t, row.data(), DType::I32);
      const std::vector<float> path =
          diffusion::flow_coef_rows({cal_.time.data() + first, static_cast<std::size_t>(n)});
      d.coefs = arena.tensor({n, math::kNumLossCoefs}, DType::F32);
      upload(d.coefs, path.data(), DType::F32);
    }
    return d;
  }

  // The model's inputs for rows d: x_t on the backend, the model timesteps and labels uploaded.
  void inputs(const DeviceRows& d, std::int64_t first, std::int64_t n, StageInputs& in, Arena& arena) const {
    in.images = arena.tensor(d.x0.shape, be_.compute_dtype());
    be_.q_sample(d.x0, d.noise, d.t, d.coefs, in.images);
    std::vector<float> t(static_cast<std::size_t>(n));
    if (flow_) {
      for (std::int64_t i = 0; i < n; ++i) t[i] = static_cast<float>(cal_.time[first + i]);
    } else {
      const std::vector<std::int64_t> t64(cal_.t.begin() + first, cal_.t.begin() + first + n);
      const auto model_t = schedule_.model_timesteps(t64);
      for (std::int64_t i = 0; i < n; ++i) t[i] = static_cast<float>(model_t[i]);
    }
    upload_stage_inputs(be_, cfg_, n, {nullptr, t.data(), cal_.y.data() + first}, in, arena);
  }

 private:
  void upload(const Tensor& dst, const void* host, DType dtype) const {
    be_.copy(dst, Tensor{const_cast<void*>(host), dtype, dst.shape, Device::Host});
  }
  Backend& be_;
  const DiTConfig& cfg_;
  const Calibration& cal_;
  bool flow_;
  diffusion::Schedule schedule_;
  std::vector<float> table_;
};

constexpr std::int64_t kScoreBatch = 16;  // calibration rows per forward

// The mean training loss of `model` (whole or with a block left out) on the calibration batch.
double mean_loss(Backend& be, const DiTStage& model, const Calibration& cal, const ScoreRecipe& recipe,
                 const CalibrationFeed& feed) {
  const math::LossKind kind = diffusion::loss_kind(recipe.objective, model.config().learn_sigma);
  Arena saved(be), scratch(be);
  double sum = 0;
  for (std::int64_t first = 0; first < cal.n; first += kScoreBatch) {
    const std::int64_t n = std::min(kScoreBatch, cal.n - first);
    saved.reset();
    StageInputs in;
    const DeviceRows d = feed.rows(first, n, saved);
    feed.inputs(d, first, n, in, saved);
    const Tensor out = forward_chunks(model, in, saved, scratch).final.out;
    const Tensor dout = saved.tensor(out.shape, out.dtype), terms = saved.tensor({n, 3}, DType::F32);
    be.sample_loss(diffusion_loss_fn(kind, d.x0, 1.0f),
                   {.a = out, .grad = dout, .x0 = d.x0, .noise = d.noise, .t = d.t, .coefs = d.coefs, .terms = terms});
    const std::vector<float> h = to_host(be, terms);
    for (std::int64_t i = 0; i < n; ++i) sum += h[3 * i];
  }
  return sum / double(cal.n);
}

// The teacher without block k: its embedders and blocks [0, k) as one chunk, blocks [k + 1, depth)
// and the final layer as the next, the teacher's parameters copied in.
std::unique_ptr<DiTStage> without_block(Backend& be, const DiTStage& teacher, int k, Comm& tp) {
  const DiTConfig& cfg = teacher.config();
  auto m = std::make_unique<DiTStage>(
      be, cfg, std::vector<StageLayout>{{0, k, true, false}, {k + 1, cfg.depth, false, true}}, tp, 1,
      teacher.options());
  ParamSet& ps = m->params();
  for (std::size_t i = 0; i < ps.size(); ++i)
    be.copy(ps.value(static_cast<int>(i)), teacher.params().value(ps.specs()[i].name));
  return m;
}

}  // namespace

std::vector<double> block_similarity(Backend& be, const DiTStage& model, std::int64_t rows, std::int64_t batch,
                                     const StageFeed& feed) {
  const DiTConfig& cfg = model.config();
  DIT_CHECK(model.chunks() == 1 && model.layout().first_block == 0 && model.layout().end_block == cfg.depth &&
                model.layout().has_embed && model.layout().has_final,
            "block similarity needs the whole model on one rank");
  std::vector<double> sums(static_cast<std::size_t>(cfg.depth), 0.0);
  Arena saved(be), scratch(be);
  for (std::int64_t first = 0; first < rows; first += batch) {
    const std::int64_t n = std::min(batch, rows - first);
    saved.reset();
    StageInputs in;
    feed(first, n, in, saved);
    const StageActs a = model.forward(in, saved, scratch);
    std::vector<float> x_in = to_host(be, a.x_in);
    for (int b = 0; b < cfg.depth; ++b) {
      std::vector<float> x_out = to_host(be, a.blocks[b].x_out);
      sums[b] += cosine_sum(x_in, x_out, cfg.hidden_size);
      x_in = std::move(x_out);
    }
  }
  const double tokens = double(rows) * cfg.num_patches();
  for (double& s : sums) s /= tokens;
  return sums;
}

Calibration draw_calibration(const Dataset& data, const DiTConfig& cfg, const ScoreRecipe& recipe, std::int64_t n,
                             std::uint64_t seed) {
  diffusion::TrainObjective uniform = recipe.objective;
  uniform.timesteps.sampling = diffusion::TimestepSampling::Uniform;
  const diffusion::Schedule schedule = diffusion::create_diffusion({"", cfg.learn_sigma, recipe.diffusion_steps});
  const BatchSource source(data, schedule, BatchPlan::make(n, 1, static_cast<int>(n)), seed, 0.0, cfg.num_classes,
                           uniform);
  Microbatch b = source.get(0, 0, 0);
  Calibration c;
  c.n = n;
  c.seed = seed;
  c.x0 = std::move(b.x_start);
  c.t = std::move(b.t);
  c.time = std::move(b.time);
  c.y = std::move(b.y);
  return c;
}

BlockScores score_blocks(Backend& be, const DiTStage& teacher, const Calibration& cal, const ScoreRecipe& recipe,
                         BlockScore score) {
  const DiTConfig& cfg = teacher.config();
  const CalibrationFeed feed(be, cfg, cal, recipe);
  BlockScores out;
  if (score == BlockScore::Cos) {
    out.score = block_similarity(be, teacher, cal.n, kScoreBatch,
                                 [&](std::int64_t first, std::int64_t n, StageInputs& in, Arena& arena) {
                                   feed.inputs(feed.rows(first, n, arena), first, n, in, arena);
                                 });
    return out;
  }
  out.full_loss = mean_loss(be, teacher, cal, recipe, feed);
  SelfComm tp;
  for (int k = 0; k < cfg.depth; ++k)
    out.score.push_back(mean_loss(be, *without_block(be, teacher, k, tp), cal, recipe, feed) - out.full_loss);
  return out;
}

}  // namespace dit
