// Knowledge distillation from a teacher (see distill.h).
#include "engine/distill.h"

#include <algorithm>
#include <functional>
#include <sstream>

#include "core/error.h"
#include "io/weights.h"
#include "parallel/sequence_parallel.h"

namespace dit {

double DistillSettings::feature_weight_at(std::int64_t step, std::int64_t steps) const {
  if (feature_decay == FeatureDecay::None || steps <= 1) return feature_weight;
  return feature_weight * (1.0 - static_cast<double>(step) / static_cast<double>(steps - 1));
}

std::vector<FeaturePair> default_feature_pairs(int student_depth, int teacher_depth, const std::vector<int>& kept) {
  std::vector<FeaturePair> pairs;
  const bool recorded = static_cast<int>(kept.size()) == student_depth;
  for (int i = 0; i < student_depth; ++i) {
    const std::int64_t by_ratio = (std::int64_t(i) + 1) * teacher_depth / student_depth - 1;
    const int t = !recorded ? static_cast<int>(by_ratio) : i + 1 < student_depth ? kept[i + 1] - 1 : teacher_depth - 1;
    pairs.push_back({i, t});
  }
  return pairs;
}

namespace {

std::string pair_text(const FeaturePair& p) {
  return "student block " + std::to_string(p.student) + " <-> teacher block " + std::to_string(p.teacher);
}

// An invariant: TrainSetup::make named distill.student_layers / teacher_layers and the widths first.
void check_pairs(const std::vector<FeaturePair>& pairs, const DiTConfig& student, const DiTConfig& teacher) {
  std::vector<bool> seen(static_cast<std::size_t>(student.depth), false);
  for (const FeaturePair& p : pairs) {
    DIT_CHECK(p.student >= 0 && p.student < student.depth && p.teacher >= 0 && p.teacher < teacher.depth,
              "feature pair ", pair_text(p), " is outside the student's ", student.depth, " or the teacher's ",
              teacher.depth, " blocks");
    DIT_CHECK(!seen[p.student], "student block ", p.student, " appears in two feature pairs");
    seen[p.student] = true;
  }
  DIT_CHECK(pairs.empty() || student.hidden_size == teacher.hidden_size, "feature pairs compare hidden states of ",
            "equal widths, not ", student.hidden_size, " (student) and ", teacher.hidden_size, " (teacher)");
}

}  // namespace

DistillSettings distill_settings(const RunConfig& cfg, const DiTConfig& teacher, const std::vector<int>& kept) {
  const DistillSection& d = cfg.distill;
  const DiTConfig& s = cfg.model.dit;
  DistillSettings out;
  out.teacher = d.teacher;
  out.teacher_model = teacher;
  if (d.teacher.empty()) return out;
  out.output_weight = d.output_weight;
  out.target_weight = d.target_weight;
  out.feature_weight = d.feature_weight;
  out.feature_decay = d.feature_decay;
  out.mask_sigma = d.mask_sigma;
  if (d.feature_weight > 0) {
    if (d.student_layers.empty()) {
      out.pairs = default_feature_pairs(s.depth, teacher.depth, kept);
    } else {
      for (std::size_t k = 0; k < d.student_layers.size(); ++k)
        out.pairs.push_back({d.student_layers[k], d.teacher_layers[k]});
    }
    check_pairs(out.pairs, s, teacher);
  }
  return out;
}

namespace {

// The teacher boundaries b_1..b_{n-1} for chunk boundaries of the student: b_c within [lo_c, hi_c]
// (every pair of an earlier chunk before it, of a later one after), as near c T / n as allowed.
// Empty when some lo_c > hi_c.
std::vector<int> teacher_bounds(int teacher_depth, const std::vector<StageLayout>& student,
                                const std::vector<FeaturePair>& pairs) {
  const int n = static_cast<int>(student.size());
  const auto chunk_of = [&](int block) {
    for (int c = 0; c < n; ++c)
      if (block >= student[c].first_block && block < student[c].end_block) return c;
    return n - 1;
  };
  std::vector<int> bounds = {0};
  for (int c = 1; c < n; ++c) {
    int lo = 0, hi = teacher_depth;
    for (const FeaturePair& p : pairs) {
      if (chunk_of(p.student) < c)
        lo = std::max(lo, p.teacher + 1);
      else
        hi = std::min(hi, p.teacher);
    }
    if (lo > hi) return {};
    // lo and hi only grow with c, so the clamped boundaries never decrease.
    bounds.push_back(std::clamp(static_cast<int>(std::int64_t(c) * teacher_depth / n), lo, hi));
  }
  bounds.push_back(teacher_depth);
  return bounds;
}

// A split of the student's blocks into n chunks (counts) that the pairs allow, or empty.
std::vector<int> servable_student_split(int depth, int n, int teacher_depth, const std::vector<FeaturePair>& pairs) {
  std::vector<int> counts;
  std::function<bool(int, int)> search = [&](int first, int chunk) {
    if (chunk == n - 1) {
      if (depth - first < 1) return false;
      counts.push_back(depth - first);
      std::vector<StageLayout> layouts;
      int b = 0;
      for (int k : counts) layouts.push_back({b, b + k, false, false}), b += k;
      if (!teacher_bounds(teacher_depth, layouts, pairs).empty()) return true;
      counts.pop_back();
      return false;
    }
    for (int k = 1; first + k <= depth - (n - 1 - chunk); ++k) {
      counts.push_back(k);
      if (search(first + k, chunk + 1)) return true;
      counts.pop_back();
    }
    return false;
  };
  return search(0, 0) ? counts : std::vector<int>{};
}

}  // namespace

std::vector<int> serving_student_split(const DiTConfig& teacher, const std::vector<StageLayout>& student,
                                       const std::vector<FeaturePair>& pairs) {
  const int depth = student.back().end_block;
  return depth <= 40 ? servable_student_split(depth, static_cast<int>(student.size()), teacher.depth, pairs)
                     : std::vector<int>{};
}

bool teacher_fits(const DiTConfig& teacher, const std::vector<StageLayout>& student,
                  const std::vector<FeaturePair>& pairs) {
  return !teacher_bounds(teacher.depth, student, pairs).empty();
}

std::vector<StageLayout> teacher_chunks(const DiTConfig& teacher, const std::vector<StageLayout>& student,
                                        const std::vector<FeaturePair>& pairs) {
  const std::vector<int> bounds = teacher_bounds(teacher.depth, student, pairs);
  DIT_CHECK(!bounds.empty(), "the feature pairs cannot each live on one pipeline stage of the student's split: "
            "a later stage's pair reaches an earlier teacher block");
  std::vector<StageLayout> out;
  const int n = static_cast<int>(student.size());
  for (int c = 0; c < n; ++c) out.push_back({bounds[c], bounds[c + 1], c == 0, c == n - 1});
  return out;
}

TeacherStage::TeacherStage(Backend& be, const DiTConfig& teacher, std::vector<StageLayout> chunks, Comm& tp,
                           const DiTStage& student, const DistillSettings& settings, Comm* shard_over,
                           bool prefetch)
    : be_(&be), tp_(&tp), student_(&student), settings_(settings), acts_(be) {
  StageOptions opt = StageOptions::forward_only(student.options().placement);
  opt.sequence_parallel = student.options().sequence_parallel;
  const bool sharded = shard_over != nullptr && shard_over->size() > 1;
  model_ = std::make_unique<DiTStage>(be, teacher, std::move(chunks), tp, sharded ? shard_over->size() : 1, opt);
  if (!sharded) return;
  // Not the student's gathers' tag: the student's next unit may be on its way meanwhile.
  constexpr int kTeacherGatherTag = 37;
  gather_ = std::make_unique<UnitGather>(be, model_->params().flat_values(), *shard_over, model_->units(),
                                         prefetch, kTeacherGatherTag);
  model_->set_residency(gather_.get());
}

void TeacherStage::load(const std::string& path) {
  load_weights(path, model_->params());
  if (gather_) gather_->hand_back();  // the other ranks' shards, read whole, go
}

std::vector<Tensor> TeacherStage::forward_inputs(int, int chunk, std::int64_t n, Arena& arena) {
  if (model_->layout(chunk).has_embed) return {};
  const DType dt = be_->compute_dtype();
  const std::int64_t d = model_->config().hidden_size;
  return {arena.tensor({n, model_->local_tokens(), d}, dt), arena.tensor({n, d}, dt)};
}

StageCompanion::Output TeacherStage::forward(int mb, int chunk, const StageInputs& in,
                                             const std::vector<Tensor>& inputs, const StageActs& student_acts,
                                             Arena& arena, Arena& scratch) {
  Backend& be = *be_;
  const DType dt = be.compute_dtype();
  const StageLayout &tl = model_->layout(chunk), &sl = student_->layout(chunk);
  acts_.reset();
  StageInputs tin;
  if (tl.has_embed) {
    tin.images = in.images, tin.t = in.t, tin.ids = in.ids;
  } else {
    tin.x = inputs.at(0), tin.c = inputs.at(1);
  }
  const StageActs ta = model_->forward(tin, acts_, scratch, chunk);
  Output o;
  const bool sp = model_->options().sequence_parallel;
  for (const FeaturePair& p : settings_.pairs) {
    if (p.student < sl.first_block || p.student >= sl.end_block) continue;
    const Tensor& fs = student_acts.blocks.at(p.student - sl.first_block).x_out;
    const Tensor& ft = ta.blocks.at(p.teacher - tl.first_block).x_out;
    const std::int64_t n = fs.dim(0);
    const Tensor terms = terms_.rows(static_cast<std::int64_t>(mb) * n, n);
    BlockGrad g{p.student - sl.first_block, arena.tensor(fs.shape, dt)};
    const Arena::Mark m = scratch.mark();
    if (sp) {  // the mask's statistics are over every token: the loss runs on all of them
      const Shape all{n, student_->config().num_patches(), fs.dim(2)};
      const Tensor fs_all = scratch.tensor(all, dt), ft_all = scratch.tensor(all, dt), g_all = scratch.tensor(all, dt);
      gather_tokens(*tp_, be, fs, fs_all, scratch);
      gather_tokens(*tp_, be, ft, ft_all, scratch);
      be.sample_loss(feature_distill_fn(fs_all, settings_.mask_sigma, grad_scale_),
                     {.a = fs_all, .b = ft_all, .grad = g_all, .terms = terms});
      split_tokens(*tp_, be, g_all, g.dx, scratch);
    } else {
      be.sample_loss(feature_distill_fn(fs, settings_.mask_sigma, grad_scale_),
                     {.a = fs, .b = ft, .grad = g.dx, .terms = terms});
    }
    scratch.rewind(m);
    o.block_grads.push_back(g);
  }
  auto keep = [&](const Tensor& t) {
    Tensor copy = arena.tensor(t.shape, t.dtype);
    be.copy(copy, t);
    return copy;
  };
  if (tl.has_final)
    o.out = keep(ta.final.out);
  else
    o.send = {keep(ta.x_out()), keep(ta.c)};
  acts_.reset();
  return o;
}

}  // namespace dit
