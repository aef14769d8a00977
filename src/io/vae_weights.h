// A VAE's weights as people download them: a safetensors file in diffusers' naming (today's
// attention names to_q/to_k/to_v/to_out.0 or the legacy query/key/value/proj_attn) or in the
// original latent-diffusion naming (encoder.down.0.block.0..., mid.attn_1.q as 1x1 convolutions,
// the decoder's up blocks in reverse order), optionally under a full checkpoint's
// "first_stage_model." prefix. The architecture comes from diffusers' config.json beside the file
// (config.json in its folder, or <stem>_config.json), else from the tensors' shapes with 32 norm
// groups, as every Stable Diffusion VAE has.
#pragma once

#include <memory>
#include <string>

#include "io/safetensors.h"
#include "layers/vae.h"

namespace dit {

enum class VaeNaming : std::uint8_t { Diffusers, DiffusersLegacyAttention, Ldm };
const char* vae_naming_name(VaeNaming n);

// What a VAE without config.json takes on trust (its shapes give every other size): 32 norm groups
// and scaling_factor 0.18215. describe() says so, and a dataset prepared with it records it.
extern const char* const kVaeAssumed;

struct VaeFile {
  std::string path, config_path;  // config_path empty: the architecture came from the shapes
  VaeConfig config;
  VaeNaming naming = VaeNaming::Diffusers;
  std::string prefix;             // "first_stage_model." in a full checkpoint, else ""
  double scaling_factor = 0.18215, shift_factor = 0.0;  // latent = (mean - shift) * scale
  // config.json's latents_mean and latents_std (one per latent channel, or none), as diffusers'
  // SDXL pipelines use them: latent = (mean - latents_mean) * scale / latents_std.
  std::vector<double> latents_mean, latents_std;
  // config.json's force_upcast (diffusers' default, true for Stable Diffusion's VAEs): the VAE runs
  // in fp32 even where the rest runs in 16 bits.
  bool force_upcast = true;
  std::shared_ptr<SafetensorsFile> file;

  // The file's name of a parameter (diffusers' current name).
  std::string stored_name(const std::string& name) const;
  // Values of a parameter, its stored shape checked (a 1x1 conv (C, C, 1, 1) stands for a linear
  // (C, C)): a missing or misshapen tensor throws naming both names and the file.
  VaeWeightSource source() const;
  std::string describe() const;  // one line for `inspect` and the logs
};

// Reads the header and the architecture; every parameter's presence and shape is checked here, so
// a file that opens builds a Vae.
// `config`, when not empty, is the architecture's config.json, read instead of looking beside the
// weights (a latent-diffusion checkpoint comes without one).
VaeFile open_vae(const std::string& path, const std::string& config = "");
// The config.json a VAE at `path` is read with: `given`, else the one found beside the weights
// (<stem>_config.json, then config.json), else "" (the architecture from the shapes). A found one is
// an input like a given one: every command declares it by this path (io/command_files.h).
std::string vae_config_path(const std::string& path, const std::string& given = "");

}  // namespace dit
