// The dataset file schema's writer (see dataset_writer.h).
#include "io/dataset_writer.h"

#include "core/error.h"
#include "io/sealed_h5.h"

namespace dit {

void write_dataset_attr(hid_t obj, const std::string& name, hid_t file_type, hid_t mem_type, const void* value,
                        hsize_t count, const std::string& where) {
  h5::Handle space(count == 0 ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &count, nullptr), H5Sclose);
  h5::Handle a(H5Acreate2(obj, name.c_str(), file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  DIT_CHECK(bool(a), where, ": cannot create attribute '", name, "'");
  DIT_H5_CHECK(H5Awrite(a.get(), mem_type, value), where, " @", name);
}

void write_dataset_attr_strings(hid_t obj, const std::string& name, const std::vector<std::string>& v,
                                h5::AttrShape shape, const std::string& where) {
  h5::Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.get(), H5T_VARIABLE);
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  std::vector<const char*> ptrs;
  for (const auto& s : v) ptrs.push_back(s.c_str());
  write_dataset_attr(obj, name, type.get(), type.get(), ptrs.data(),
                     shape == h5::AttrShape::Scalar ? 0 : hsize_t(v.size()), where);
}

std::uint64_t DatasetLayout::file_bound() const {
  const std::uint64_t raw = std::uint64_t(n) * std::uint64_t(sample()) * (latents ? 4 : 1) + std::uint64_t(n) * 4;
  return raw + raw / 1024 + 2 * text_bytes + (std::uint64_t(1) << 20);
}

DatasetWriter::DatasetWriter(const std::string& tmp, const DatasetLayout& layout) : tmp_(tmp), layout_(layout) {
  // The 1.8 format or newer: dense attribute storage, so long class_names lists fit; a user block
  // for the seal, a whole-file CRC-32 (sealed_h5.h).
  file_.emplace(h5::DiskFile::create_reserved(tmp_, layout.file_bound(), {h5::Format::V18, h5::kSealBytes}));
  const hsize_t dims[4] = {hsize_t(layout.n), hsize_t(layout.c), hsize_t(layout.h), hsize_t(layout.w)};
  h5::Handle space(H5Screate_simple(4, dims, nullptr), H5Sclose);
  const h5::Handle dcpl = h5::creation_plist(H5P_DATASET_CREATE, tmp_);
  images_ = h5::Handle(H5Dcreate2(file_->get(), "images", layout.latents ? H5T_IEEE_F32LE : H5T_STD_U8LE, space.get(),
                                  H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
                       H5Dclose);
  DIT_CHECK(bool(images_), tmp_, ": cannot create dataset 'images' (", h5::error_text(), ")");
}

DatasetWriter::~DatasetWriter() {
  images_.reset();
  file_.reset();
}

void DatasetWriter::write(std::int64_t first, std::int64_t count, const void* data) {
  if (count == 0) return;
  const hsize_t start[4] = {hsize_t(first), 0, 0, 0};
  const hsize_t size[4] = {hsize_t(count), hsize_t(layout_.c), hsize_t(layout_.h), hsize_t(layout_.w)};
  h5::Handle fspace(H5Dget_space(images_.get()), H5Sclose);
  DIT_H5_CHECK(H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, start, nullptr, size, nullptr), tmp_, " images");
  h5::Handle mspace(H5Screate_simple(4, size, nullptr), H5Sclose);
  DIT_CHECK(H5Dwrite(images_.get(), layout_.latents ? H5T_NATIVE_FLOAT : H5T_NATIVE_UINT8, mspace.get(), fspace.get(),
                     H5P_DEFAULT, data) >= 0,
            tmp_, ": cannot write samples ", first, "..", first + count - 1, " (", h5::error_text(), ")");
}

void DatasetWriter::finish(const std::vector<std::int32_t>& labels, int num_classes, const std::string& source) {
  DIT_CHECK(std::int64_t(labels.size()) == layout_.n, tmp_, ": ", labels.size(), " labels for ", layout_.n,
            " samples");
  const hsize_t n = labels.size();
  h5::Handle space(H5Screate_simple(1, &n, nullptr), H5Sclose);
  const h5::Handle dcpl = h5::creation_plist(H5P_DATASET_CREATE, tmp_);
  h5::Handle d(H5Dcreate2(file_->get(), "labels", H5T_STD_I32LE, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
               H5Dclose);
  DIT_CHECK(bool(d), tmp_, ": cannot create dataset 'labels' (", h5::error_text(), ")");
  DIT_CHECK(H5Dwrite(d.get(), H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, labels.data()) >= 0, tmp_,
            ": cannot write labels (", h5::error_text(), ")");
  d.reset();
  const std::int64_t classes = num_classes;
  write_dataset_attr(file(), "num_classes", H5T_STD_I64LE, H5T_NATIVE_INT64, &classes, 0, tmp_);
  write_dataset_attr_strings(file(), "kind", {layout_.latents ? "latents" : "images"}, h5::AttrShape::Scalar, tmp_);
  write_dataset_attr_strings(file(), "source", {source}, h5::AttrShape::Scalar, tmp_);
  images_.reset();
  file_->close();
  h5::seal_file(tmp_);
}

}  // namespace dit
