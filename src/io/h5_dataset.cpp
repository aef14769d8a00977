// The HDF5 dataset reader (schema in h5_dataset.h): validates the whole file at open, then reads
// one sample per call as a single hyperslab, converting to float32 in the model's range.
#include "io/h5_dataset.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "core/error.h"
#include "io/sealed_h5.h"

namespace dit {
namespace {

// "uint8", "float64", "string", ... for messages about a wrong dtype.
std::string type_name(hid_t type) {
  const H5T_class_t cls = H5Tget_class(type);
  const std::size_t bits = 8 * H5Tget_size(type);
  if (cls == H5T_INTEGER)
    return (H5Tget_sign(type) == H5T_SGN_NONE ? "uint" : "int") + std::to_string(bits);
  if (cls == H5T_FLOAT) return "float" + std::to_string(bits);
  if (cls == H5T_STRING) return "string";
  if (cls == H5T_COMPOUND) return "compound";
  if (cls == H5T_ENUM) return "enum";
  return "an unsupported type (class " + std::to_string(int(cls)) + ")";
}

bool fits_int(std::int64_t v) { return v > 0 && v <= std::numeric_limits<int>::max(); }

}  // namespace

H5Dataset::H5Dataset(const std::string& path, double latent_scale_override)
    : file_(h5::File::open_read(path)) {
  open_images();
  read_attrs(latent_scale_override);
  open_labels();
}

void H5Dataset::open_images() {
  const std::string& p = file_.path();
  DIT_CHECK(file_.exists("images"), p, ": dataset 'images' is missing, expected images ",
            "(N, C, H, W) of uint8 or float32");
  images_ = h5::Handle(H5Dopen2(file_.id(), "images", H5P_DEFAULT), H5Dclose);
  DIT_CHECK(bool(images_), p, ": 'images' is not a dataset, expected (N, C, H, W)");
  file_space_ = h5::Handle(H5Dget_space(images_.get()), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(file_space_.get());
  DIT_CHECK(rank == 4, p, ": dataset 'images' has rank ", rank, ", expected 4 (N, C, H, W)");
  hsize_t dims[4] = {0, 0, 0, 0};
  H5Sget_simple_extent_dims(file_space_.get(), dims, nullptr);
  const Shape s{std::int64_t(dims[0]), std::int64_t(dims[1]), std::int64_t(dims[2]),
                std::int64_t(dims[3])};
  DIT_CHECK(s[0] > 0 && fits_int(s[1]) && fits_int(s[2]) && fits_int(s[3]) &&
                s[1] * s[2] * s[3] <= (std::int64_t(1) << 30),
            p, ": dataset 'images' has shape ", s.str(),
            ", expected N >= 1 samples of a non-empty C x H x W below 2^30 values");
  n_ = s[0];
  shape_ = SampleShape{int(s[1]), int(s[2]), int(s[3])};

  h5::Handle type(H5Dget_type(images_.get()), H5Tclose);
  const std::string tn = type_name(type.get());
  DIT_CHECK(tn == "uint8" || tn == "float32", p, ": dataset 'images' holds ", tn,
            ", expected uint8 (images) or float32 (latents)");
  latents_ = tn == "float32";
  const hsize_t numel = hsize_t(shape_.numel());
  mem_space_ = h5::Handle(H5Screate_simple(1, &numel, nullptr), H5Sclose);
  DIT_CHECK(bool(mem_space_), p, ": cannot create a memory dataspace of ", numel, " values");
}

// latent_mean and latent_std: both or neither, one finite number per channel, every std > 0.
void H5Dataset::read_channel_stats() {
  const std::string& p = file_.path();
  const bool has_mean = file_.has_attr("/", "latent_mean"), has_std = file_.has_attr("/", "latent_std");
  DIT_CHECK(has_mean == has_std, p, ": attribute '", has_mean ? "latent_std" : "latent_mean",
            "' is missing, expected both latent_mean and latent_std or neither");
  if (!has_mean) return;
  const std::size_t c = static_cast<std::size_t>(shape_.channels);
  channel_mean_ = h5::read_attr_doubles(file_, "/", "latent_mean", c);
  channel_std_ = h5::read_attr_doubles(file_, "/", "latent_std", c);
  for (std::size_t i = 0; i < c; ++i)
    DIT_CHECK(std::isfinite(channel_mean_[i]) && std::isfinite(channel_std_[i]) && channel_std_[i] > 0, p,
              ": attributes 'latent_mean' / 'latent_std' of channel ", i, " = ", channel_mean_[i], " / ",
              channel_std_[i], ", expected a finite mean and a std > 0");
}

void H5Dataset::read_attrs(double latent_scale_override) {
  const std::string& p = file_.path();
  DIT_CHECK(file_.has_attr("/", "num_classes"), p,
            ": attribute 'num_classes' is missing, expected an integer >= 1");
  const std::int64_t classes = file_.attr_int("/", "num_classes");
  DIT_CHECK(classes >= 1 && classes <= std::numeric_limits<int>::max(), p,
            ": attribute 'num_classes' = ", classes, ", expected an integer >= 1");
  classes_ = int(classes);

  const std::string dtype_kind = latents_ ? "latents" : "images";
  kind_ = file_.has_attr("/", "kind") ? file_.attr_string("/", "kind") : dtype_kind;
  DIT_CHECK(kind_ == "images" || kind_ == "latents", p, ": attribute 'kind' = '", kind_,
            "', expected 'images' or 'latents'");
  DIT_CHECK(kind_ == dtype_kind, p, ": attribute 'kind' = '", kind_,
            "' but dataset 'images' holds ", latents_ ? "float32" : "uint8", ", expected ",
            kind_ == "images" ? "uint8" : "float32", " for kind '", kind_, "'");
  source_ = file_.has_attr("/", "source") ? file_.attr_string("/", "source") : "";

  scale_ = 1;
  if (latents_) {
    scale_ = file_.has_attr("/", "latent_scale") ? file_.attr_double("/", "latent_scale")
                                                 : kDefaultLatentScale;
    DIT_CHECK(std::isfinite(scale_) && scale_ > 0, p, ": attribute 'latent_scale' = ", scale_,
              ", expected a finite number > 0");
    DIT_CHECK(std::isfinite(latent_scale_override) && latent_scale_override >= 0,
              "latent scale override = ", latent_scale_override, " for ", p,
              ", expected > 0 (or 0 for the file's value)");
    if (latent_scale_override > 0) scale_ = latent_scale_override;
    shift_ = file_.has_attr("/", "latent_shift") ? file_.attr_double("/", "latent_shift") : 0.0;
    DIT_CHECK(std::isfinite(shift_), p, ": attribute 'latent_shift' = ", shift_, ", expected a finite number");
    read_channel_stats();
  }
  if (file_.has_attr("/", "class_names")) {
    class_names_ = file_.attr_strings("/", "class_names");
    DIT_CHECK(std::int64_t(class_names_.size()) == classes, p, ": attribute 'class_names' has ",
              class_names_.size(), " names, expected num_classes = ", classes);
  }
}

void H5Dataset::open_labels() {
  const std::string& p = file_.path();
  DIT_CHECK(file_.exists("labels"), p, ": dataset 'labels' is missing, expected labels (N,) = (",
            n_, ",) of integers");
  const Shape s = file_.shape("labels");
  DIT_CHECK(s.rank == 1, p, ": dataset 'labels' has rank ", s.rank, " (shape ", s.str(),
            "), expected 1: (N,) = (", n_, ",)");
  DIT_CHECK(s[0] == n_, p, ": dataset 'labels' has ", s[0], " entries but 'images' has ", n_,
            " samples, expected one label per sample");
  {
    h5::Handle d(H5Dopen2(file_.id(), "labels", H5P_DEFAULT), H5Dclose);
    DIT_CHECK(bool(d), p, ": 'labels' is not a dataset");
    h5::Handle type(H5Dget_type(d.get()), H5Tclose);
    DIT_CHECK(H5Tget_class(type.get()) == H5T_INTEGER, p, ": dataset 'labels' holds ",
              type_name(type.get()), ", expected integers");
  }
  const std::vector<std::int64_t> all = file_.read_ints("labels");
  labels_.resize(all.size());
  for (std::size_t i = 0; i < all.size(); ++i) {
    DIT_CHECK(all[i] >= 0 && all[i] < classes_, p, ": labels[", i, "] = ", all[i],
              " is outside [0, num_classes = ", classes_, ")");
    labels_[i] = std::int32_t(all[i]);
  }
}

int H5Dataset::label(std::int64_t index) const {
  DIT_CHECK(index >= 0 && index < n_, path(), ": sample ", index, " outside [0, ", n_, ")");
  return labels_[std::size_t(index)];
}

int H5Dataset::get(std::int64_t index, float* out) const {
  const int y = label(index);
  const hsize_t start[4] = {hsize_t(index), 0, 0, 0};
  const hsize_t count[4] = {1, hsize_t(shape_.channels), hsize_t(shape_.height),
                            hsize_t(shape_.width)};
  DIT_H5_CHECK(
      H5Sselect_hyperslab(file_space_.get(), H5S_SELECT_SET, start, nullptr, count, nullptr),
      path(), ": select sample ", index);
  // HDF5 converts uint8 to float exactly; the mapping to the model's range follows.
  DIT_H5_CHECK(H5Dread(images_.get(), H5T_NATIVE_FLOAT, mem_space_.get(), file_space_.get(),
                       H5P_DEFAULT, out),
               path(), ": read sample ", index, " of 'images'");
  const std::int64_t numel = shape_.numel();
  if (latents_) {
    // A file sealed by other means than prepare-data may hold NaN or Inf: name it here, not as a
    // diverged loss steps later.
    DIT_CHECK(std::all_of(out, out + numel, [](float v) { return std::isfinite(v); }), path(), ": sample ", index,
              " of 'images' holds NaN or Inf values: expected finite latents (re-create the dataset with dit_mp "
              "prepare-data latents)");
    const float scale = float(scale_), shift = float(shift_);
    if (channel_mean_.empty()) {
      for (std::int64_t i = 0; i < numel; ++i) out[i] = (out[i] - shift) * scale;
    } else {
      const std::int64_t plane = shape_.height * shape_.width;
      for (std::int64_t c = 0; c < shape_.channels; ++c) {
        const float mean = float(channel_mean_[std::size_t(c)]), times = float(scale_ / channel_std_[std::size_t(c)]);
        for (float* v = out + c * plane; v < out + (c + 1) * plane; ++v) *v = (*v - shift - mean) * times;
      }
    }
  } else {
    for (std::int64_t i = 0; i < numel; ++i) out[i] = out[i] / 127.5f - 1.0f;
  }
  return y;
}

std::string H5Dataset::describe() const {
  std::ostringstream os;
  os << (source_.empty() ? kind_ : source_) << ": " << n_ << " " << kind_ << " of "
     << shape_.channels << "x" << shape_.height << "x" << shape_.width << ", " << classes_
     << " classes";
  if (latents_) os << ", latent scale " << scale_;
  if (shift_ != 0) os << " after shift " << shift_;
  if (!channel_mean_.empty()) os << " with per-channel mean and std";
  os << " (" << path() << ")";
  return os.str();
}

void verify_dataset_seal(const std::string& path) {
  // Checked whole before HDF5 parses it: damaged HDF5 structure can crash HDF5 itself.
  h5::verify_seal(path, "re-create it with dit_mp prepare-data, or seal a file made by other means with "
                        "tools/dit_checkpoint.py seal FILE");
}

std::unique_ptr<Dataset> open_dataset(const std::string& path, double latent_scale_override) {
  verify_dataset_seal(path);
  return std::make_unique<H5Dataset>(path, latent_scale_override);
}

}  // namespace dit
