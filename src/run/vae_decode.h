// Pictures from latent samples: the VAE's decoder over a backend of its own. The VAE runs in fp32
// whatever the run's precision, as diffusers upcasts its VAEs (bf16 storage keeps a small VAE's
// decode within 1.7e-2 of float64, tests/unit/test_vae.cpp, near the 2e-2 rule; a 4x deeper kl-f8
// would not be), on the run's kind of device.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/vae_weights.h"
#include "parallel/rows.h"

namespace dit {

// The checks a command makes before it samples: the VAE's latents are the model's (channels), and
// its pictures have `in_channels` 1 or 3. `what` names the command's flag in messages.
void check_vae_fits(const VaeFile& vae, int model_channels, const std::string& what);

// The largest batch of at most `batch` latents (L, h, w) whose decode fits `budget` bytes, as
// planned (layers/vae.h vae_decode_bytes: parameters, activations, scratch); throws with the
// numbers when one latent does not fit. `where` names the memory ("GPU 0: 12 GiB free").
int decode_batch(const VaeConfig& cfg, std::int64_t h, std::int64_t w, int batch, double budget,
                 const std::string& where, BackendKind backend = BackendKind::Cuda);

// images (n, C, h f, w f) in [-1, 1] of latents (n, L, h, w) in the model's space: the decoder
// reads z = x / scaling_factor + shift_factor (per channel x latents_std_c / scaling_factor +
// latents_mean_c where the VAE has them), at most `batch` latents at a time (fewer when the
// device's free memory, or on the CPU the machine's, holds fewer), on `backend` ("cpu" or "cuda")
// in fp32. `ranks_here` ranks of this machine share its memory (the CPU budget is split).
std::vector<float> decode_latents(const VaeFile& vae, const std::string& backend, const std::vector<float>& latents,
                                  std::int64_t n, std::int64_t h, std::int64_t w, int batch, int ranks_here = 1);

// Collective over `world` (every rank of the job): rank 0's latents (rows of (L, h, w)) dealt out
// over the ranks (parallel/rows.h), each rank decoding its share as decode_latents does; returns
// this rank's pictures (rows of (C, h f, w f)). A failure on any rank ends every rank with its
// message. Each picture depends on its latent only, so the pictures are the same bits at any
// number of ranks.
Rows decode_share(Comm& world, const VaeFile& vae, const std::string& backend, const Rows& latents, std::int64_t h,
                  std::int64_t w);

// decode_share's pictures gathered on rank 0 in the latents' order (empty on the other ranks).
std::vector<float> decode_on_ranks(Comm& world, const VaeFile& vae, const std::string& backend,
                                   const std::vector<float>& latents, std::int64_t n, std::int64_t h, std::int64_t w);

}  // namespace dit
