// The model config as attributes of the group /config: the one schema of a checkpoint's index, a
// weights file (model.h5, ema.h5) and a golden file, written and read in one place.
#pragma once

#include <string>

#include "io/h5.h"
#include "layers/dit_config.h"

namespace dit::h5 {

// Writes /config with the DiTConfig's twelve fields and its block variants (mlp, norm, pos_embed,
// qk_norm, only where they are not DiT's: files of DiT models stay as they were); returns the group for a file's own extras
// (a checkpoint adds out_channels, a weights file diffusion_steps).
Handle write_model_config(hid_t file, const DiTConfig& c, const std::string& where);

// Whether frequency_embedding_size and layernorm_eps may be absent (golden files made before they
// were recorded: the defaults hold) or are required (what dit_mp writes).
enum class LaterFields { Required, Defaulted };

// Reads /config (absent block variants are DiT's): every integer in [0, 2^31), a config that can be built, and out_channels (when
// present) as learn_sigma and in_channels imply. Errors name the file; `missing` names what the file
// is without the group, e.g. "the model config" or "not a golden file?".
DiTConfig read_model_config(const File& f, LaterFields later, const std::string& missing);

// "depth 4 vs 6, hidden_size 64 vs 96" (a vs b); "" when equal.
std::string config_differences(const DiTConfig& a, const DiTConfig& b);

}  // namespace dit::h5
