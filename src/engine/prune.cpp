// Depth pruning: the kept blocks and the student's weights file (see prune.h).
#include "engine/prune.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "io/h5.h"
#include "io/weights.h"

namespace dit {

std::vector<int> checked_keep(const std::vector<int>& keep, int teacher_depth, int depth) {
  // Invariants: io/prune_text.h checked the --keep text against both depths.
  DIT_CHECK(int(keep.size()) == depth, "keeping ", keep.size(), " teacher blocks for a student of depth ", depth);
  std::vector<int> sorted = keep;
  std::sort(sorted.begin(), sorted.end());
  for (const int k : sorted)
    DIT_CHECK(k >= 0 && k < teacher_depth, "kept block ", k, " is not one of the teacher's ", teacher_depth);
  for (std::size_t i = 1; i < sorted.size(); ++i)
    DIT_CHECK(sorted[i] != sorted[i - 1], "teacher block ", sorted[i], " kept twice");
  return sorted;
}

std::string blocks_text(const std::vector<int>& blocks) {
  std::string s;
  for (int b : blocks) s += (s.empty() ? "" : ",") + std::to_string(b);
  return s;
}

std::vector<int> keep_by_scores(const std::vector<double>& scores, int depth, BlockScore score) {
  const int teacher = static_cast<int>(scores.size());
  DIT_CHECK(depth >= 1 && depth < teacher, "pruning to depth ", depth, ": expected 1 to ", teacher - 1,
            " (below the teacher's depth ", teacher, ")");
  // Candidates: every block but the last, most droppable first (ties: the earlier block).
  std::vector<int> order(static_cast<std::size_t>(teacher - 1));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return score == BlockScore::Cos ? scores[a] > scores[b] : scores[a] < scores[b];
  });
  std::vector<bool> dropped(static_cast<std::size_t>(teacher), false);
  for (int i = 0; i < teacher - depth; ++i) dropped[order[i]] = true;
  std::vector<int> keep;
  for (int b = 0; b < teacher; ++b)
    if (!dropped[b]) keep.push_back(b);
  return keep;
}

DiTConfig student_config(const DiTConfig& teacher, int depth) {
  DiTConfig s = teacher;
  s.depth = depth;
  return s;
}

namespace {
// "blocks.<j>.rest" -> "blocks.<keep[j]>.rest"; other names unchanged.
std::string teacher_name(const std::string& name, const std::vector<int>& keep) {
  const std::string prefix = "blocks.";
  if (name.rfind(prefix, 0) != 0) return name;
  const std::size_t dot = name.find('.', prefix.size());
  DIT_CHECK(dot != std::string::npos, "tensor '", name, "': expected blocks.<index>.<name>");
  const int j = std::stoi(name.substr(prefix.size(), dot - prefix.size()));
  return prefix + std::to_string(keep.at(static_cast<std::size_t>(j))) + name.substr(dot);
}
}  // namespace

std::map<std::string, std::vector<float>> student_tensors(const DiTConfig& teacher_cfg,
                                                          const std::map<std::string, std::vector<float>>& teacher,
                                                          const std::vector<int>& keep) {
  const DiTConfig student = student_config(teacher_cfg, static_cast<int>(keep.size()));
  std::map<std::string, std::vector<float>> out;
  for (const ParamSpec& s : DiTStage::declare(student, StageLayout::whole(student))) {
    const std::string from = teacher_name(s.name, keep);
    const auto it = teacher.find(from);
    DIT_CHECK(it != teacher.end(), "the teacher has no tensor '", from, "' for the student's '", s.name, "'");
    DIT_CHECK(std::int64_t(it->second.size()) == s.global.numel(), "tensor '", from, "' holds ", it->second.size(),
              " values, the student's '", s.name, "' ", s.global.numel());
    out[s.name] = it->second;
  }
  return out;
}

std::map<std::string, std::vector<float>> read_model_tensors(const std::string& path, const DiTConfig& cfg) {
  h5::silence_errors();
  static_cast<void>(read_weights_config(path));  // sealed
  const h5::File file = h5::File::open_read(path);
  std::map<std::string, std::vector<float>> out;
  for (const ParamSpec& s : DiTStage::declare(cfg, StageLayout::whole(cfg))) {
    std::vector<float> v = read_weight_tensor(file, s.name, s.global);
    DIT_CHECK(std::all_of(v.begin(), v.end(), [](float x) { return std::isfinite(x); }), path, ": tensor '",
              s.name, "' holds NaN or Inf: the weights file is damaged or from a diverged run");
    out[s.name] = std::move(v);
  }
  return out;
}

void write_pruned_weights(const std::string& teacher_path, const std::string& out, const std::vector<int>& keep,
                          const std::string& pruned_by) {
  const DiTConfig teacher = read_weights_config(teacher_path);
  const std::vector<int> kept = checked_keep(keep, teacher.depth, static_cast<int>(keep.size()));
  DIT_CHECK(!kept.empty() && int(kept.size()) < teacher.depth, "pruning keeps ", kept.size(), " of the teacher's ",
            teacher.depth, " blocks: expected 1 to ", teacher.depth - 1);
  const DiTConfig student = student_config(teacher, static_cast<int>(kept.size()));
  WeightsProvenance p;
  p.kept_layers = kept;
  p.teacher_depth = teacher.depth;
  p.pruned_by = pruned_by;
  save_weights(out, student, student_tensors(teacher, read_model_tensors(teacher_path, teacher), kept),
               read_weights_diffusion_steps(teacher_path), read_weights_objective(teacher_path), p);
}

}  // namespace dit
