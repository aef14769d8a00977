// The writer of the dataset file schema (io/h5_dataset.h): the samples in slabs, then the labels
// and the root attributes, sealed (io/sealed_h5.h) in finish(). It fills the temporary file of the
// atomic writer (io/atomic_file.h: write_atomically), which renames the finished file into place;
// every object is created without times (h5::creation_plist), so the same contents give the same
// bytes. Used by every prepare-data source (io/prepare.h, engine/image_latents.h).
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "io/h5.h"

namespace dit {

struct DatasetLayout {
  std::int64_t n = 0;
  int c = 0, h = 0, w = 0;
  bool latents = false;          // float32 latents, else uint8 images
  std::uint64_t text_bytes = 0;  // of attribute strings (class names, the source)
  std::int64_t sample() const { return std::int64_t(c) * h * w; }
  // An upper bound of the file's size: the samples and labels, twice the strings, and 1 MiB plus
  // 0.1% for HDF5's own structures (its disk space is reserved up front).
  std::uint64_t file_bound() const;
};

// Errors name `tmp`, which the atomic writer rewords as the target.
class DatasetWriter {
 public:
  DatasetWriter(const std::string& tmp, const DatasetLayout& layout);
  // Unfinished (an exception): the dataset closes first, then the file is emptied and closed
  // (h5::DiskFile); the atomic writer removes it.
  ~DatasetWriter();
  DatasetWriter(const DatasetWriter&) = delete;
  DatasetWriter& operator=(const DatasetWriter&) = delete;

  hid_t file() const { return file_->get(); }
  // Samples [first, first + count): uint8 or float32 (as the layout says), (count, C, H, W).
  void write(std::int64_t first, std::int64_t count, const void* data);
  // The labels (N,), the attributes num_classes, kind and source; closes and seals the file.
  void finish(const std::vector<std::int32_t>& labels, int num_classes, const std::string& source);

 private:
  std::string tmp_;
  DatasetLayout layout_;
  std::optional<h5::DiskFile> file_;
  h5::Handle images_;
};

// A root (or any object's) attribute of `count` values (0: a scalar).
void write_dataset_attr(hid_t obj, const std::string& name, hid_t file_type, hid_t mem_type, const void* value,
                        hsize_t count, const std::string& where);
// Variable-length UTF-8 strings: h5py reads them as str.
void write_dataset_attr_strings(hid_t obj, const std::string& name, const std::vector<std::string>& v,
                                h5::AttrShape shape, const std::string& where);

}  // namespace dit
