// The shape of a DiT model: sizes, presets of the official configs (DiT-{S,B,L,XL}/{2,4,8}),
// and validation with messages that name the field. Pure data; no backend.
#pragma once

#include <string>
#include <vector>

namespace dit {

// The largest input side validate() accepts (pixels or latents): num_patches() then fits an int.
inline constexpr int kMaxModelSide = 16384;

struct DiTConfig {
  int input_size = 32;       // latent (or image) side; the model sees input_size^2 pixels
  int patch_size = 2;
  int in_channels = 4;
  int hidden_size = 1152;    // D
  int depth = 28;
  int num_heads = 16;        // H
  double mlp_ratio = 4.0;    // M = int(D * mlp_ratio)
  int num_classes = 1000;
  bool learn_sigma = true;
  double class_dropout_prob = 0.1;
  int frequency_embedding_size = 256;
  double layernorm_eps = 1e-6;

  int out_channels() const { return learn_sigma ? 2 * in_channels : in_channels; }
  int grid() const { return input_size / patch_size; }
  int num_patches() const { return grid() * grid(); }  // T
  int mlp_hidden() const { return static_cast<int>(hidden_size * mlp_ratio); }
  int head_dim() const { return hidden_size / num_heads; }
  long long num_params() const;  // trainable parameters (pos_embed excluded)
  // Forward FLOPs of one image (2 per multiply-add), attention included.
  double forward_flops() const;
  // Its parts: one block, the embedders, the final layer (per image, all tp ranks together).
  double block_flops() const;
  double embed_flops() const;
  double final_flops() const;

  // Throws naming the field and what would fit when the model cannot be built.
  void validate() const;
};

// "DiT-XL/2" etc. with the official depth/width/heads; other fields keep their defaults.
DiTConfig dit_preset(const std::string& name);
std::vector<std::string> dit_preset_names();

}  // namespace dit
