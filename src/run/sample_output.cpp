// Sample grids and their raw samples (see sample_output.h).
#include "run/sample_output.h"

#include <filesystem>
#include <numeric>

#include "io/png.h"
#include "io/sample_file.h"
#include "parallel/world.h"

namespace dit {

std::vector<int> grid_labels(const std::vector<int>& classes, int num_classes, int per_class) {
  std::vector<int> rows = classes;
  if (rows.empty()) {
    rows.resize(static_cast<std::size_t>(num_classes));
    std::iota(rows.begin(), rows.end(), 0);
  }
  std::vector<int> labels;
  for (int c : rows)
    for (int i = 0; i < per_class; ++i) labels.push_back(c);
  return labels;
}

std::string write_sample_outputs(const DiTConfig& cfg, const std::vector<float>& samples,
                                 const std::vector<int>& labels, int per_class, const std::string& png_path) {
  const std::string raw = std::filesystem::path(png_path).replace_extension(".h5").string();
  const bool picture = cfg.in_channels == 1 || cfg.in_channels == 3;
  if (world_rank() == 0) {
    const int n = static_cast<int>(labels.size());
    write_samples_h5(raw, samples, labels, cfg.in_channels, cfg.input_size, cfg.input_size);
    if (picture) {
      const Grid g = make_grid(samples.data(), Shape{n, cfg.in_channels, cfg.input_size, cfg.input_size},
                               n / per_class, per_class, 2);
      write_png(png_path, g.width, g.height, g.channels, g.pixels.data());
    }
  }
  return picture ? png_path + " and " + raw : raw + " (latents: decode them with the VAE to see pictures)";
}

std::string write_decoded_outputs(const DiTConfig& cfg, const std::vector<float>& latents,
                                  const std::vector<float>& images, int channels, int size,
                                  const std::vector<int>& labels, int per_class, const std::string& png_path) {
  const std::string raw = std::filesystem::path(png_path).replace_extension(".h5").string();
  const int n = static_cast<int>(labels.size());
  write_samples_h5(raw, latents, labels, cfg.in_channels, cfg.input_size, cfg.input_size);
  const Grid g = make_grid(images.data(), Shape{n, channels, size, size}, n / per_class, per_class, 2);
  write_png(png_path, g.width, g.height, g.channels, g.pixels.data());
  return png_path + " (decoded by the VAE) and " + raw + " (latents)";
}

}  // namespace dit
