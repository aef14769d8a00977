// What a sample grid is and where it goes: one row of images per class, written as a PNG and the
// raw samples as HDF5 beside it (latent models get the HDF5 only).
#pragma once

#include <string>
#include <vector>

#include "layers/dit_config.h"

namespace dit {

// Labels of a grid: one row per class of `classes` (every class when empty), `per_class` columns.
std::vector<int> grid_labels(const std::vector<int>& classes, int num_classes, int per_class);

// Rank 0 writes the grid PNG (rows = classes) and the samples as HDF5 beside it (`png_path` with
// .h5). Latent models (not 1 or 3 channels) get the HDF5 only: their samples need the VAE decoder
// to become pictures. Returns what was written, for the log line.
std::string write_sample_outputs(const DiTConfig& cfg, const std::vector<float>& samples,
                                 const std::vector<int>& labels, int per_class, const std::string& png_path);
// A latent model's outputs with its VAE: the grid of the decoded `images` (n, channels, size,
// size) and the raw latent samples beside it. Called on the rank that decoded.
std::string write_decoded_outputs(const DiTConfig& cfg, const std::vector<float>& latents,
                                  const std::vector<float>& images, int channels, int size,
                                  const std::vector<int>& labels, int per_class, const std::string& png_path);

}  // namespace dit
