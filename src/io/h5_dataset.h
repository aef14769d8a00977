// A Dataset over one HDF5 file of images or VAE latents with class labels (the schema below),
// written by io/prepare.h. The schema is validated when the file opens, so a bad file fails at
// start-up with a message naming the file and the object, never mid-run.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/dataset.h"
#include "io/h5.h"

namespace dit {

// The dataset file schema (one HDF5 file):
//   /images   (N, C, H, W)  uint8    kind "images":  pixels 0..255, served as x / 127.5 - 1
//                           float32  kind "latents": VAE latents, served as (x - latent_shift) * latent_scale
//   /labels   (N,)          any integer type, each in [0, num_classes)
//   root attributes:
//     num_classes   integer >= 1                                         (required)
//     kind          "images" | "latents"; must agree with the images dtype (optional: inferred)
//     source        free text, e.g. "fashion-mnist train"                 (optional)
//     latent_scale  float > 0, latents only; default 0.18215 (SD VAE)     (optional)
//     latent_shift  finite float, latents only; default 0 (SD3/Flux VAEs' shift_factor) (optional)
//     latent_mean, latent_std  C floats each (std > 0), latents only: served per channel as
//                   (x - latent_shift - mean_c) * latent_scale / std_c instead            (optional)
//     class_names   array of num_classes strings (image folders)         (optional)
// Files are untrusted input: everything above is checked at open, all labels included.
// Error messages read "<path>: <object> <problem>, expected <what>".
constexpr double kDefaultLatentScale = 0.18215;

class H5Dataset final : public Dataset {
 public:
  // latent_scale_override > 0 replaces the file's latent_scale (latents only; ignored for images).
  explicit H5Dataset(const std::string& path, double latent_scale_override = 0);

  std::int64_t size() const override { return n_; }
  SampleShape shape() const override { return shape_; }
  int num_classes() const override { return classes_; }
  // One hyperslab read of sample `index` (not thread-safe: reads come from one thread).
  int get(std::int64_t index, float* out) const override;
  std::string describe() const override;

  int label(std::int64_t index) const;  // without reading the sample
  const std::string& path() const { return file_.path(); }
  const std::string& kind() const { return kind_; }  // "images" or "latents"
  bool latents() const override { return latents_; }
  const std::string& source() const { return source_; }
  double latent_scale() const { return scale_; }  // the factor applied to latents (1 for images)
  double latent_shift() const { return shift_; }  // subtracted from latents before the scale (0 for images)
  const std::vector<double>& latent_mean() const { return channel_mean_; }  // per channel, or empty
  const std::vector<double>& latent_std() const { return channel_std_; }
  const std::vector<std::string>& class_names() const { return class_names_; }  // may be empty

 private:
  void open_images();
  void open_labels();
  void read_attrs(double latent_scale_override);
  void read_channel_stats();

  h5::File file_;
  h5::Handle images_, file_space_, mem_space_;
  bool latents_ = false;
  std::int64_t n_ = 0;
  SampleShape shape_;
  int classes_ = 0;
  std::vector<std::int32_t> labels_;  // (N,)
  std::string kind_, source_;
  double scale_ = 1, shift_ = 0;
  std::vector<double> channel_mean_, channel_std_;  // empty, or one per channel
  std::vector<std::string> class_names_;
};

// Opens a dataset file (today always the HDF5 schema above).
std::unique_ptr<Dataset> open_dataset(const std::string& path, double latent_scale_override = 0);
// The check open_dataset makes before HDF5 parses a byte: the file's seal matches its contents.
// Every reader of a dataset file (training, evaluation's reference and floor) calls it first.
void verify_dataset_seal(const std::string& path);

}  // namespace dit
