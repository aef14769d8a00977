// HDF5 reading helpers (see h5.h).
#include "io/h5.h"
#include "io/file_safety.h"

#include <algorithm>

namespace dit::h5 {

namespace {

// A dataset's declared size must be backed by bytes the file stores for it: one flipped byte in a
// header can declare terabytes (or a dataset that was never written reads as fill values), and
// reading would allocate all of it first. Deflate, the only compression these files use, cannot
// shrink data by more than about 1032:1. A virtual dataset's bytes are in its source files.
void check_stored(const std::string& path, const std::string& dataset, hid_t d, hid_t type,
                  const Shape& shape) {
  double declared = static_cast<double>(H5Tget_size(type));
  for (int i = 0; i < shape.rank; ++i) declared *= static_cast<double>(shape.dims[i]);
  if (declared == 0) return;
  Handle dcpl(H5Dget_create_plist(d), H5Pclose);
  if (dcpl && H5Pget_layout(dcpl.get()) == H5D_VIRTUAL) return;  // its bytes live in the source files
  const double stored = static_cast<double>(H5Dget_storage_size(d));
  DIT_CHECK(stored * 1100 >= declared, path, ": dataset '", dataset, "' declares shape ", shape.str(), " (",
            declared, " bytes) but the file stores ", stored, " bytes of it: damaged, truncated or never written");
}

}  // namespace

void silence_errors() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

File File::open_read(const std::string& path) {
  silence_errors();
  File f;
  f.path_ = path;
  require_regular(path, "the HDF5 file");  // H5Fis_hdf5 would block on a FIFO
  htri_t is = H5Fis_hdf5(path.c_str());
  DIT_CHECK(is > 0, path, ": ", is == 0 ? "not an HDF5 file" : "cannot open (missing or unreadable)");
  hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  DIT_CHECK(id >= 0, path, ": cannot open as HDF5");
  f.file_ = Handle(id, H5Fclose);
  return f;
}

bool File::exists(const std::string& object) const {
  // Check each prefix so that a missing parent group is not an error.
  std::size_t pos = 0;
  while (true) {
    pos = object.find('/', pos + 1);
    const std::string prefix = object.substr(0, pos);
    if (!prefix.empty() && prefix != "/" && H5Lexists(id(), prefix.c_str(), H5P_DEFAULT) <= 0)
      return false;
    if (pos == std::string::npos) return true;
  }
}

std::vector<std::string> File::members(const std::string& group) const {
  DIT_CHECK(exists(group), path_, ": group '", group, "' is missing");
  Handle g(H5Gopen2(id(), group.c_str(), H5P_DEFAULT), H5Gclose);
  DIT_CHECK(bool(g), path_, ": '", group, "' is not a group");
  H5G_info_t info;
  DIT_H5_CHECK(H5Gget_info(g.get(), &info), path_, " ", group);
  std::vector<std::string> names;
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    ssize_t len = H5Lget_name_by_idx(g.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0,
                                     H5P_DEFAULT);
    DIT_CHECK(len >= 0, path_, ": cannot list ", group);
    std::string name(static_cast<std::size_t>(len), '\0');
    H5Lget_name_by_idx(g.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), len + 1,
                       H5P_DEFAULT);
    names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

Handle File::open_dataset(const std::string& dataset) const {
  DIT_CHECK(exists(dataset), path_, ": dataset '", dataset, "' is missing");
  Handle d(H5Dopen2(id(), dataset.c_str(), H5P_DEFAULT), H5Dclose);
  DIT_CHECK(bool(d), path_, ": '", dataset, "' is not a dataset");
  return d;
}

Shape File::shape(const std::string& dataset) const {
  Handle d = open_dataset(dataset);
  Handle space(H5Dget_space(d.get()), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space.get());
  DIT_CHECK(rank >= 0 && rank <= kMaxDims, path_, ": dataset '", dataset, "' has rank ", rank,
            ", expected at most ", kMaxDims);
  hsize_t dims[kMaxDims] = {0};
  H5Sget_simple_extent_dims(space.get(), dims, nullptr);
  Shape s;
  s.rank = rank;
  for (int i = 0; i < rank; ++i) s.dims[i] = static_cast<std::int64_t>(dims[i]);
  return s;
}

Array File::read(const std::string& dataset) const {
  Array a;
  a.shape = shape(dataset);
  Handle d = open_dataset(dataset);
  Handle type(H5Dget_type(d.get()), H5Tclose);
  const H5T_class_t cls = H5Tget_class(type.get());
  DIT_CHECK(cls == H5T_FLOAT || cls == H5T_INTEGER, path_, ": dataset '", dataset,
            "' holds neither floats nor integers");
  check_stored(path_, dataset, d.get(), type.get(), a.shape);
  constexpr std::int64_t kMaxElements = std::int64_t(1) << 34;  // 128 GiB of doubles
  DIT_CHECK(a.shape.numel() <= kMaxElements, path_, ": dataset '", dataset, "' of shape ",
            a.shape.str(), " is implausibly large");
  a.values.resize(static_cast<std::size_t>(a.shape.numel()));
  DIT_H5_CHECK(H5Dread(d.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, a.values.data()),
               path_, " ", dataset);
  return a;
}

Array File::read(const std::string& dataset, const Shape& expected) const {
  const Shape s = shape(dataset);
  DIT_CHECK(s == expected, path_, ": dataset '", dataset, "' has shape ", s.str(), ", expected ",
            expected.str());
  return read(dataset);
}

std::vector<std::int64_t> File::read_ints(const std::string& dataset) const {
  Handle d = open_dataset(dataset);
  Handle type(H5Dget_type(d.get()), H5Tclose);
  DIT_CHECK(H5Tget_class(type.get()) == H5T_INTEGER, path_, ": dataset '", dataset,
            "' must hold integers");
  const Shape s = shape(dataset);
  check_stored(path_, dataset, d.get(), type.get(), s);
  std::vector<std::int64_t> v(static_cast<std::size_t>(s.numel()));
  DIT_H5_CHECK(H5Dread(d.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), path_,
               " ", dataset);
  return v;
}

bool File::has_attr(const std::string& object, const std::string& name) const {
  return exists(object) && H5Aexists_by_name(id(), object.c_str(), name.c_str(), H5P_DEFAULT) > 0;
}

Handle File::open_attr(const std::string& object, const std::string& name) const {
  DIT_CHECK(has_attr(object, name), path_, ": attribute '", name, "' of '", object, "' is missing");
  return Handle(H5Aopen_by_name(id(), object.c_str(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT),
                H5Aclose);
}

double File::attr_double(const std::string& object, const std::string& name) const {
  Handle a = open_attr(object, name);
  double v = 0;
  DIT_H5_CHECK(H5Aread(a.get(), H5T_NATIVE_DOUBLE, &v), path_, " ", object, "@", name,
               " (expected a number)");
  return v;
}

std::int64_t File::attr_int(const std::string& object, const std::string& name) const {
  Handle a = open_attr(object, name);
  Handle type(H5Aget_type(a.get()), H5Tclose);
  const H5T_class_t cls = H5Tget_class(type.get());
  if (cls == H5T_FLOAT) {
    const double v = attr_double(object, name);
    DIT_CHECK(v == static_cast<double>(static_cast<std::int64_t>(v)), path_, ": attribute ",
              object, "@", name, " = ", v, ", expected an integer");
    return static_cast<std::int64_t>(v);
  }
  DIT_CHECK(cls == H5T_INTEGER || cls == H5T_ENUM, path_, ": attribute ", object, "@", name,
            " must be an integer");
  std::int64_t v = 0;
  DIT_H5_CHECK(H5Aread(a.get(), H5T_NATIVE_INT64, &v), path_, " ", object, "@", name);
  return v;
}

bool File::attr_bool(const std::string& object, const std::string& name) const {
  // h5py stores numpy bools as an 8-bit enum {FALSE, TRUE}; plain integers work too.
  Handle a = open_attr(object, name);
  Handle type(H5Aget_type(a.get()), H5Tclose);
  const H5T_class_t cls = H5Tget_class(type.get());
  DIT_CHECK(cls == H5T_ENUM || cls == H5T_INTEGER, path_, ": attribute ", object, "@", name,
            " must be a boolean");
  std::int8_t v = 0;
  Handle native(H5Tget_native_type(type.get(), H5T_DIR_DEFAULT), H5Tclose);
  DIT_CHECK(H5Tget_size(native.get()) == 1 || cls == H5T_INTEGER, path_, ": attribute ", object,
            "@", name, " has an unexpected boolean type");
  if (cls == H5T_INTEGER) return attr_int(object, name) != 0;
  DIT_H5_CHECK(H5Aread(a.get(), native.get(), &v), path_, " ", object, "@", name);
  return v != 0;
}

std::vector<std::string> File::attr_strings(const std::string& object,
                                            const std::string& name) const {
  Handle a = open_attr(object, name);
  Handle type(H5Aget_type(a.get()), H5Tclose);
  DIT_CHECK(H5Tget_class(type.get()) == H5T_STRING, path_, ": attribute ", object, "@", name,
            " must be a string");
  Handle space(H5Aget_space(a.get()), H5Sclose);
  const hssize_t n = H5Sget_simple_extent_npoints(space.get());
  DIT_CHECK(n >= 0 && n < (1 << 24), path_, ": attribute ", object, "@", name, " has ", n,
            " strings");
  std::vector<std::string> out;
  if (H5Tis_variable_str(type.get()) > 0) {
    std::vector<char*> ptrs(static_cast<std::size_t>(n), nullptr);
    Handle mem(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(mem.get(), H5T_VARIABLE);
    H5Tset_cset(mem.get(), H5Tget_cset(type.get()));
    DIT_H5_CHECK(H5Aread(a.get(), mem.get(), ptrs.data()), path_, " ", object, "@", name);
    for (char* p : ptrs) out.emplace_back(p ? p : "");
    H5Dvlen_reclaim(mem.get(), space.get(), H5P_DEFAULT, ptrs.data());
  } else {
    const std::size_t len = H5Tget_size(type.get());
    std::vector<char> buf(len * static_cast<std::size_t>(n) + 1, '\0');
    DIT_H5_CHECK(H5Aread(a.get(), type.get(), buf.data()), path_, " ", object, "@", name);
    for (hssize_t i = 0; i < n; ++i) {
      std::string s(buf.data() + i * len, len);
      out.push_back(s.substr(0, s.find('\0')));
    }
  }
  return out;
}

std::string File::attr_string(const std::string& object, const std::string& name) const {
  auto v = attr_strings(object, name);
  DIT_CHECK(v.size() == 1, path_, ": attribute ", object, "@", name, " must be one string");
  return v[0];
}

}  // namespace dit::h5
