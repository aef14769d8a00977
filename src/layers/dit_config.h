// The shape of a DiT model: sizes, the block variants of LightningDiT (Yao et al. 2025: SwiGLU,
// RMSNorm, 2-D RoPE, q/k norm), presets of the official configs (DiT-{S,B,L,XL}/{2,4,8} and
// LightningDiT's), and validation with messages that name the field. Pure data; no backend.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/named.h"

namespace dit {

// model.mlp: DiT's GELU MLP (fc1, fc2) or LightningDiT's SwiGLUFFN (w12 = [x1 | x2], w3).
enum class MlpKind : std::uint8_t { Gelu, Swiglu };
inline constexpr Named<MlpKind> kMlpNames[] = {{MlpKind::Gelu, "gelu"}, {MlpKind::Swiglu, "swiglu"}};
// model.norm: every norm of the blocks and the final layer. LayerNorm has no affine weights
// (DiT); RMSNorm has a weight (LightningDiT's RMSNorm, eps 1e-6).
enum class NormKind : std::uint8_t { LayerNorm, RmsNorm };
inline constexpr Named<NormKind> kNormNames[] = {{NormKind::LayerNorm, "layernorm"},
                                                 {NormKind::RmsNorm, "rmsnorm"}};
// model.pos_embed: the fixed 2-D sin-cos embedding added to the tokens (always, as LightningDiT
// keeps it with rope too), and with Rope also the 2-D axial rotary embedding of q and k.
enum class PosEmbed : std::uint8_t { Sincos, Rope };
inline constexpr Named<PosEmbed> kPosEmbedNames[] = {{PosEmbed::Sincos, "sincos"},
                                                     {PosEmbed::Rope, "rope"}};

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
  MlpKind mlp = MlpKind::Gelu;
  NormKind norm = NormKind::LayerNorm;
  PosEmbed pos_embed = PosEmbed::Sincos;
  bool qk_norm = false;  // per-head norm of q and k (of model.norm's kind, with weights)

  int out_channels() const { return learn_sigma ? 2 * in_channels : in_channels; }
  int grid() const { return input_size / patch_size; }
  int num_patches() const { return grid() * grid(); }  // T
  int mlp_hidden() const { return static_cast<int>(hidden_size * mlp_ratio); }
  // SwiGLU's hidden width F: int(2/3 * mlp_hidden()) as LightningDiT rounds it (w12 is 2F wide).
  int swiglu_hidden() const { return static_cast<int>(2.0 / 3.0 * mlp_hidden()); }
  // The width the MLP splits over tp: M for GELU, F for SwiGLU.
  int ffn_hidden() const { return mlp == MlpKind::Swiglu ? swiglu_hidden() : mlp_hidden(); }
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
// "LightningDiT-XL/1" etc. (LightningDiT's sizes) also set the variants of LightningDiT's
// released configs: swiglu, rmsnorm, rope, no qk norm, no learned sigma.
DiTConfig dit_preset(const std::string& name);
std::vector<std::string> dit_preset_names();

}  // namespace dit
