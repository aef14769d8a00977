// `prepare-data images DIR --vae FILE`: a folder of class sub-folders of pictures into a latent
// dataset, data-parallel over the ranks. The files are taken in batches of consecutive files
// (batch b = files [b B, (b + 1) B)); rank r encodes the batches r, r + world, ... of those not yet
// done, each on its own backend and Vae, and appends each finished batch to its part in the work
// folder (io/latent_work.h). Rank 0 then assembles the dataset from the records, batch by batch,
// under a temporary name renamed into place, and removes the work folder. A batch's latents depend
// on its files alone (every op of the VAE works per image; the noise of --latent sample is keyed
// by the image), so the file does not depend on the number of ranks, and a killed preparation
// rerun with the same command resumes and writes the same bytes. (On the CPU, the GEMMs' blocking
// follows the thread count: give every rank the same OMP_NUM_THREADS for bit-identical latents.)
//
// Each picture: decoded to RGB, ADM's center_crop_arr to size x size, x / 127.5 - 1
// (io/image_prep.h); with flips both, also mirrored (stored after the original, as LightningDiT
// extracts them). Latent: the mean of the encoder's Gaussian, or a draw mean + std * noise
// (diffusers' DiagonalGaussianDistribution: log-variance clamped to [-30, 20]) with the noise from
// Philox (seed, LatentSample, step = flip, index = the file's position). Stored unscaled as float32
// (N, L, size / f, size / f), kind "latents", latent_scale = the VAE's scaling_factor and, when
// the VAE has one, latent_shift = its shift_factor (training serves (x - shift) * scale, as
// diffusers normalises SD3 and Flux latents).
#pragma once

#include <cstdint>
#include <string>

#include "io/prepare.h"

namespace dit {

enum class Flips : std::uint8_t { None, Both };
enum class LatentDraw : std::uint8_t { Mean, Sample };
enum class BadFiles : std::uint8_t { Fail, Skip };

struct ImageLatentsOptions {
  std::string dir, out;
  std::string vae, vae_config;  // the weights (.safetensors) and, when not beside them, config.json
  int size = 256;               // the picture's side before encoding (a multiple of the VAE's factor)
  Flips flips = Flips::None;
  LatentDraw latent = LatentDraw::Mean;
  std::uint64_t seed = 0;       // of --latent sample's noise
  BadFiles bad_files = BadFiles::Fail;
  int batch = 16;               // files per batch (and per record of the work folder)
  std::string backend = "cpu";  // the VAE's backend on every rank (cpu or cuda)
  std::string precision = "fp32";  // fp32 unless the VAE allows 16 bits (its config's force_upcast false)
  Overwrite overwrite = Overwrite::No;
  std::string bad_file_hint;    // appended to a bad file's line (the command's words for what to do)
};

// Collective: every rank calls it with the same options. Errors are agreed (one line, every rank
// exits non-zero); a bad file with BadFiles::Fail is one such line naming the file and the reason.
// Returns what was written (on every rank).
PrepareResult prepare_image_latents(const ImageLatentsOptions& options);

// The test hook of the resume test (tests/cli/prepare_vae.sh): with DIT_PREPARE_KILL_AFTER=K in
// the environment, a rank that has appended K or more images in this run kills itself with
// SIGKILL, as a kill -9 would, leaving its work folder to be resumed.
inline constexpr const char* kKillAfterEnv = "DIT_PREPARE_KILL_AFTER";

}  // namespace dit
