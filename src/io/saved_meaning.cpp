// The settings that give saved state its meaning, compared once (see saved_meaning.h).
#include "io/saved_meaning.h"

#include <sstream>

#include "core/error.h"
#include "io/weights.h"

namespace dit {

namespace {

// How a setting of the saved side must relate to the run's: equal, free, or (learned sigma) held
// by the teacher whenever the student has it.
enum class Rule { Same, Free, TeacherCovers };

struct Row {
  const char* key;
  std::string (*value)(const SavedMeaning&);  // "" where the setting is unused by the run's kind
  Rule resume, teacher, teacher_features;
};

template <class T>
std::string text(const T& v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// The table: every setting that gives saved state its meaning, once.
// The objective comes first: diffusion.steps is compared only once both sides are DDPM.
const Row kRows[] = {
    {"diffusion.objective",
     [](const SavedMeaning& m) { return "\"" + std::string(name_of(diffusion::kObjectiveNames, m.objective)) + "\""; },
     Rule::Same, Rule::Same, Rule::Same},
    {"diffusion.steps",
     [](const SavedMeaning& m) {
       return m.objective == diffusion::Objective::Flow ? std::string() : text(m.diffusion_steps);
     },
     Rule::Same, Rule::Same, Rule::Same},
    {"model.learn_sigma", [](const SavedMeaning& m) { return std::string(m.learn_sigma ? "true" : "false"); },
     Rule::Same, Rule::TeacherCovers, Rule::TeacherCovers},
    {"model.in_channels", [](const SavedMeaning& m) { return text(m.in_channels); }, Rule::Same, Rule::Same, Rule::Same},
    {"model.input_size", [](const SavedMeaning& m) { return text(m.input_size); }, Rule::Same, Rule::Same, Rule::Same},
    {"model.num_classes", [](const SavedMeaning& m) { return text(m.num_classes); }, Rule::Same, Rule::Same, Rule::Same},
    {"model.patch_size", [](const SavedMeaning& m) { return text(m.patch_size); }, Rule::Same, Rule::Free, Rule::Same},
    {"data.latent_scale",
     [](const SavedMeaning& m) {
       return m.latent_scale > 0 && m.data != DataKind::Pixels ? text(m.latent_scale) : std::string();
     },
     Rule::Same, Rule::Free, Rule::Free},
};

Rule rule_of(const Row& r, MeaningCheck check) {
  return check == MeaningCheck::Resume ? r.resume : check == MeaningCheck::Teacher ? r.teacher : r.teacher_features;
}

// Why the setting must agree, and what to do instead.
std::string remedy(MeaningCheck check, const Row& r, const std::string& saved) {
  if (check == MeaningCheck::Resume)
    return std::string(": a resumed run keeps what its checkpoint's numbers mean; resume with ") + r.key + " = " +
           saved + ", or start a new run from its weights (run.init_from)";
  if (std::string(r.key) == "model.patch_size")
    return ": the feature loss (distill.feature_weight > 0) pairs the tokens of both; expected the same patch size, "
           "or distill.feature_weight = 0 (output KD only)";
  return std::string(": a teacher and its student must agree on ") + r.key + " (expected " + saved +
         " in the student's config, or another teacher)";
}

}  // namespace

SavedMeaning meaning_of(const RunConfig& cfg, DataKind data) {
  const DiTConfig& m = cfg.model.dit;
  return {cfg.diffusion.steps, cfg.diffusion.objective, m.learn_sigma,     m.patch_size,
          m.in_channels,       m.input_size,            m.num_classes,     cfg.data.latent_scale, data};
}

SavedMeaning meaning_of_weights(const std::string& path) {
  const DiTConfig m = read_weights_config(path);
  return {read_weights_diffusion_steps(path), read_weights_objective(path), m.learn_sigma, m.patch_size,
          m.in_channels, m.input_size, m.num_classes, 0.0};
}

void check_same_meaning(MeaningCheck check, const SavedMeaning& saved, const std::string& saved_file,
                        const SavedMeaning& now, const std::string& now_source) {
  const bool resume = check == MeaningCheck::Resume;
  const std::string what = resume ? "the checkpoint " + saved_file : "the teacher " + saved_file;
  for (const Row& r : kRows) {
    const std::string a = r.value(saved), b = r.value(now);
    const Rule rule = rule_of(r, check);
    if (rule == Rule::Free || a.empty() || b.empty() || a == b) continue;
    if (rule == Rule::TeacherCovers) {
      DIT_CHECK(!now.learn_sigma || saved.learn_sigma, r.key, " = ", b, " in ", now_source, " but ", a, " in ", what,
                ": a student learns the variance only from a teacher that does; expected a teacher with learned "
                "sigma, or ", r.key, " = false");
      continue;
    }
    DIT_FAIL(r.key, " = ", b, " in ", now_source, " but ", a, " in ", what, remedy(check, r, a));
  }
}

void check_pruned_from(const std::string& student, const std::string& teacher, int teacher_depth) {
  const WeightsProvenance p = read_weights_provenance(student);
  if (p.empty() || p.teacher_depth == teacher_depth) return;
  std::string kept;
  for (int b : p.kept_layers) kept += (kept.empty() ? "" : ",") + std::to_string(b);
  DIT_FAIL("run.init_from = ", student, " was pruned (", p.pruned_by, ") from a teacher of depth ", p.teacher_depth,
           ", keeping its blocks ", kept, ", but distill.teacher = ", teacher, " has depth ", teacher_depth,
           ": distil it from the teacher it was pruned from");
}

}  // namespace dit
