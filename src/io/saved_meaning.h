// The settings that give saved state its meaning: what a model's numbers are (the diffusion
// schedule's length, the objective and so the prediction, learned sigma, the patch, the data's
// channels, size, classes and latent scale). One table, compared in one function between a
// checkpoint and the run that resumes it, and between a teacher and its student, before anything runs.
#pragma once

#include <string>

#include "diffusion/objective.h"
#include "io/config.h"

namespace dit {

// What the run trains on, where known: data.latent_scale means something for latents only.
enum class DataKind { Unknown, Pixels, Latents };

struct SavedMeaning {
  int diffusion_steps = 1000;  // the linear beta schedule's length (the only schedule)
  diffusion::Objective objective = diffusion::Objective::Ddpm;  // ddpm predicts epsilon, flow velocity
  bool learn_sigma = true;
  int patch_size = 2, in_channels = 4, input_size = 32, num_classes = 1000;
  double latent_scale = 0;  // 0: not recorded (weights files)
  DataKind data = DataKind::Unknown;
};

// A setting unused by a run's kind is not compared: diffusion.steps under the flow objective (its
// t is continuous), data.latent_scale on pixel data (only latents are scaled).
SavedMeaning meaning_of(const RunConfig& cfg, DataKind data = DataKind::Unknown);
// A weights file's /config: its model, diffusion_steps and objective (latent scale unrecorded).
SavedMeaning meaning_of_weights(const std::string& path);

// What the comparison is for: a resume keeps every setting of its checkpoint; a student agrees
// with its teacher on the data and the recipe, learns sigma only from a teacher that does, and
// pairs tokens (the same patch) only when it learns the teacher's features.
enum class MeaningCheck { Resume, Teacher, TeacherFeatures };

// Throws at the first setting that differs, naming the key, both values and both sources:
// `saved` comes from `saved_file` (the checkpoint or the teacher), `now` from `now_source` (the
// run's config).
void check_same_meaning(MeaningCheck check, const SavedMeaning& saved, const std::string& saved_file,
                        const SavedMeaning& now, const std::string& now_source);

// A student `dit_mp prune` made (`student` with a provenance: run.init_from) records the depth of
// the teacher it was pruned from and the blocks it kept: the teacher given must have that depth
// (its default feature pairs follow the kept blocks). Throws naming both files; nothing to check
// for a student without a record.
void check_pruned_from(const std::string& student, const std::string& teacher, int teacher_depth);

}  // namespace dit
