// Sampling images from a DiT at any layout: DDPM or DDIM over a respaced schedule for ddpm
// models, SiT's Euler, Heun or Euler-Maruyama over t in [0, 1] for flow models, with
// classifier-free guidance on a doubled batch (conditional rows, then null-label rows), at every
// step or only in an interval of noise levels (guidance at high noise costs diversity: Kynkäänniemi
// et al. 2024, "Applying Guidance in a Limited Interval"). The
// samples are split over dp replicas; each step runs forward-only through the pipeline and the
// last stage's update of x travels back to stage 0 by a broadcast over the pipeline group.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backend/virtual/virtual_backend.h"
#include "diffusion/objective.h"
#include "diffusion/sampling.h"
#include "io/config.h"
#include "layers/dit_stage.h"
#include "parallel/grid.h"

namespace dit {

struct SampleRequest {
  std::vector<int> labels;     // one sample per entry
  int num_steps = 50;          // respaced steps ("N", as the official sample.py, for both samplers)
  diffusion::SamplerKind sampler = diffusion::SamplerKind::Ddim;  // ddim | ddpm; euler | heun | euler_maruyama (flow)
  double last_step_size = 0.04;  // euler_maruyama: the final Mean step (SiT's last_step_size)
  double cfg_scale = 4.0;      // 1: no guidance (no doubled batch)
  bool cfg_official = false;   // guide only the first 3 channels (the official forward_with_cfg)
  // Guidance only at the model calls whose noise level is in [cfg_t_min, cfg_t_max] (0: clean,
  // 1: pure noise); the other calls run the conditional rows alone. [0, 1]: every call. The noise
  // level is timestep / diffusion_steps for ddpm and 1 - t for flow (t = 0 noise, 1 data; so
  // LightningDiT's cfg_interval_start s is cfg_t_max = 1 - s).
  double cfg_t_min = 0.0, cfg_t_max = 1.0;
  int diffusion_steps = 1000;
  std::uint64_t seed = 0;
  std::int64_t first_index = 0;  // the first sample's index in the noise streams: batches of one
                                 // request (labels[k] is sample first_index + k) draw what one call would
  // DDPM / DDIM: whether each step clamps its predicted x0 to [-1, 1] (clip_rule below).
  diffusion::ClipDenoised clip = diffusion::ClipDenoised::kYes;
  // The normal numbers of `key` for samples [first, first + n) of the request, (n, C, H, W) in
  // order; empty: the stream (seed, Sampler, key, first_index + sample). `verify` gives the
  // reference's own draws here.
  std::function<std::vector<double>(std::uint64_t key, std::int64_t first, std::int64_t n)> given_noise;
  std::function<void()> after_step;  // called once per sampler step (e.g. a progress line); may be empty
};

// sample.clip_denoised for data of one kind: `auto` clamps pixels (their range is [-1, 1]) and not
// latents (the official DiT samples latents with clip_denoised=False); true / false as given.
diffusion::ClipDenoised clip_rule(ClipSetting setting, bool latents);

// Whether a model samples VAE latents when its data is not at hand (`sample --weights`, or a run
// recorded before sample.clip_denoised was): a VAE is named, or its channels are not an image's
// (1 or 3).
bool samples_latents(const DiTConfig& model, bool vae_named);

// The request for `labels` with the sampler settings of `s` (its steps, sampler, guidance, seed,
// clipping for data that is `latents` or pixels).
SampleRequest sample_request(const SampleSection& s, std::vector<int> labels, int diffusion_steps, bool latents);

// Returns the samples (N, C, H, W) on every rank. `stage` holds the weights to sample from
// (e.g. the EMA), for this rank's slice of the layout.
std::vector<float> sample_images(Backend& be, ParallelContext& ctx, const DiTStage& stage,
                                 const SampleRequest& req);

// The bytes one rank holds to sample `total` images, `batch` at a time (sample_from_weights), with
// the sampler settings of `req` (its labels unused), counted from the sampler's own passes: `be`
// runs, on one executor as sample_images does, each pass of a batch's largest dp share (the
// guided calls' rows doubled) through `stage`, and what they allocate on it is `backend` (on the
// planning backend, backend/virtual, nothing runs). `host` is the sampler's host buffers at their
// peak and the gathered samples.
struct SamplerBytes {
  std::size_t backend = 0;  // activation arenas, scratch and workspace of the forward passes
  std::size_t host = 0;
};
SamplerBytes sampler_bytes(VirtualBackend& be, ParallelContext& ctx, const DiTStage& stage, const SampleRequest& req,
                           std::int64_t batch, std::int64_t total);

}  // namespace dit
