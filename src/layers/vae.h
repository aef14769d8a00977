// The KL autoencoder of latent diffusion (diffusers' AutoencoderKL, Stable Diffusion's kl-f8 and
// its relatives) as layers over Backend&: the encoder turns images (N, 3, H, W) in [-1, 1] into
// the moments (N, 2L, H/f, W/f) of a diagonal Gaussian (mean, then log-variance), the decoder turns
// latents (N, L, H/f, W/f) back into images. f = 2^(blocks - 1). Forward only: the VAE is frozen
// while a DiT trains on its latents.
//
// The architecture, as diffusers builds it (Encoder, Decoder, ResnetBlock2D, Attention,
// Downsample2D, Upsample2D):
//   encoder: conv_in 3x3 -> per block i: layers_per_block ResNet blocks to block_out_channels[i],
//            then (all but the last) a stride-2 3x3 conv after padding (0, 1, 0, 1)
//            -> mid block (ResNet, single-head attention over the H W positions, ResNet)
//            -> GroupNorm, SiLU, conv_out 3x3 to 2L -> quant_conv 1x1
//   decoder: post_quant_conv 1x1 -> conv_in 3x3 -> mid block -> per block i over the reversed
//            channels: layers_per_block + 1 ResNet blocks, then (all but the last) nearest 2x
//            upsampling and a 3x3 conv -> GroupNorm, SiLU, conv_out 3x3
//   ResNet block: GroupNorm, SiLU, conv 3x3, GroupNorm, SiLU, conv 3x3, plus the input (through a
//            1x1 conv_shortcut when the channels change). Every GroupNorm has `groups` groups, eps.
// Parameters are named as diffusers names them today (io/vae_weights.h maps the other namings).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/backend_kind.h"
#include "core/arena.h"

namespace dit {

struct VaeConfig {
  int in_channels = 3, out_channels = 3, latent_channels = 4;
  std::vector<int> block_out_channels = {128, 256, 512, 512};
  int layers_per_block = 2;
  int norm_num_groups = 32;
  float eps = 1e-6f;
  bool mid_block_attention = true;
  bool use_quant_conv = true, use_post_quant_conv = true;

  int downsampling() const { return 1 << (static_cast<int>(block_out_channels.size()) - 1); }
  // Throws naming the first setting that cannot build a VAE (`where` says whose settings).
  void check(const std::string& where) const;
  std::string describe() const;  // "AutoencoderKL: blocks 128/256/512/512, 2 ResNets each, ..."
};

// One parameter: its diffusers name and shape.
struct VaeParam {
  std::string name;
  std::vector<std::int64_t> shape;
  std::int64_t numel() const;
};
// Every parameter the configuration has, in a fixed order.
std::vector<VaeParam> vae_parameters(const VaeConfig& cfg);

// Supplies a parameter's values (fp32, numel of the parameter), given what it is.
using VaeWeightSource = std::function<std::vector<float>(const VaeParam&)>;

// Device bytes a decode of `n` latents (L, h, w) takes in `dtype` on `backend`: the parameters, the
// activations and the largest convolution's scratch, from a decode run on the planning backend.
// The mid block's attention over h w positions is the GPU's composed attention (its scores
// counted) on CUDA, and on the CPU the CPU's own (streamed, no scores) unless DIT_ATTENTION=composed.
std::size_t vae_decode_bytes(const VaeConfig& cfg, DType dtype, std::int64_t n, std::int64_t h, std::int64_t w,
                             BackendKind backend = BackendKind::Cuda);
// Device bytes an encode of `n` images (in_channels, H, W) takes in `dtype`, counted the same way.
std::size_t vae_encode_bytes(const VaeConfig& cfg, DType dtype, std::int64_t n, std::int64_t height, std::int64_t width,
                             BackendKind backend = BackendKind::Cuda);

class Vae {
 public:
  // Uploads every parameter from `source` in the backend's compute dtype. On the planning backend
  // (Device::Virtual) the source is not read: only the memory is laid out (vae_decode_bytes).
  Vae(Backend& be, const VaeConfig& cfg, const VaeWeightSource& source);

  const VaeConfig& config() const { return cfg_; }
  std::int64_t parameter_count() const { return params_count_; }

  // moments (N, 2L, H/f, W/f) of images (N, in_channels, H, W), H and W multiples of f; both of
  // the compute dtype on the backend.
  void encode(const Tensor& images, const Tensor& moments);
  // images (N, out_channels, h f, w f) of latents (N, L, h, w).
  void decode(const Tensor& latents, const Tensor& images);

  // Called with diffusers' module path and the module's output after each of the named modules
  // runs (encoder.conv_in, encoder.down_blocks.0, ..., decoder.conv_out): for tests.
  std::function<void(const std::string&, const Tensor&)> on_activation;

 private:
  struct AttnWeights {
    Tensor qkv_w, qkv_b;  // [to_q; to_k; to_v] (3C, C) and (3C)
  };
  const Tensor& param(const std::string& name) const;
  Tensor alloc(Shape s);
  void emit(const std::string& name, const Tensor& t);

  Tensor conv(const std::string& p, const Tensor& x, const ConvGeometry& g);
  Tensor norm(const std::string& p, const Tensor& x, bool silu);
  Tensor resnet(const std::string& p, const Tensor& x);
  Tensor attention(const std::string& p, const Tensor& x);
  Tensor mid_block(const std::string& p, const Tensor& x);

  Backend& be_;
  VaeConfig cfg_;
  Buffer params_;
  std::vector<std::pair<std::string, Tensor>> named_;  // sorted by name
  std::vector<std::pair<std::string, AttnWeights>> attn_;
  std::int64_t params_count_ = 0;
  Arena arena_;
};

}  // namespace dit
