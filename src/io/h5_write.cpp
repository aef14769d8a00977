// HDF5 writing helpers, checked attribute readers and the error-stack text (see h5.h).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "io/file_safety.h"
#include "io/h5.h"

namespace dit::h5 {

namespace {
constexpr hsize_t kChunkElements = 1 << 20;  // 4 MiB chunks: one checksum each (kTensorWriteBuffer)
static_assert(kChunkElements * sizeof(float) == kTensorWriteBuffer);

// Rows of a chunk of a tensor of `rows` rows of `row` elements: at most kChunkElements a chunk (at
// least one row), the rows spread evenly over the fewest chunks. HDF5 stores an edge chunk whole,
// so 2100 rows in chunks of 1024 would take 3072 rows of space; in chunks of 700, 2100.
hsize_t chunk_rows(hsize_t rows, hsize_t row) {
  const hsize_t most = std::clamp<hsize_t>(kChunkElements / row, 1, rows);
  const hsize_t chunks = (rows + most - 1) / most;
  return (rows + chunks - 1) / chunks;
}

herr_t collect_error(unsigned, const H5E_error2_t* e, void* data) {
  auto* v = static_cast<std::vector<std::string>*>(data);
  if (e->desc && *e->desc) v->emplace_back(e->desc);
  return 0;
}

// The errno a failed system call left in an HDF5 message ("..., errno = 28, error message = ..."),
// or 0.
int errno_in(const std::string& desc) {
  const auto at = desc.find("errno = ");
  return at == std::string::npos ? 0 : std::atoi(desc.c_str() + at + 8);
}

// Opens an attribute holding exactly n values.
Handle open_attr(const File& f, const std::string& object, const std::string& name, std::size_t n) {
  DIT_CHECK(f.has_attr(object, name), f.path(), ": attribute '", name, "' of '", object, "' is missing");
  Handle a(H5Aopen_by_name(f.id(), object.c_str(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  Handle space(H5Aget_space(a.get()), H5Sclose);
  const hssize_t count = H5Sget_simple_extent_npoints(space.get());
  DIT_CHECK(count == hssize_t(n), f.path(), ": attribute ", object, "@", name, " holds ", count,
            " values, expected ", n);
  return a;
}

void write_attr(hid_t obj, const std::string& name, hid_t file_type, hid_t mem_type, const void* value,
                hsize_t count, AttrShape shape, const std::string& where) {
  Handle space(shape == AttrShape::Scalar ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &count, nullptr),
               H5Sclose);
  Handle a(H5Acreate2(obj, name.c_str(), file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  DIT_CHECK(bool(a), where, ": cannot create attribute '", name, "' (", error_text(), ")");
  DIT_CHECK(H5Awrite(a.get(), mem_type, value) >= 0, where, ": cannot write attribute '", name, "' (",
            error_text(), ")");
}
}  // namespace

std::string error_text() {
  std::vector<std::string> descs;  // innermost first
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, collect_error, &descs);
  H5Eclear2(H5E_DEFAULT);
  if (descs.empty()) return "HDF5 error";
  for (const std::string& d : descs)  // a failed read or write of the file: the system's words
    if (const int err = errno_in(d)) return descs.back() + ": " + describe_errno(err);
  std::string out = descs.front();
  if (descs.size() > 1 && descs.back() != descs.front()) out = descs.back() + ": " + out;
  return out;
}

// --- reading attributes ------------------------------------------------------------------------

std::vector<std::int64_t> read_attr_ints(const File& f, const std::string& object, const std::string& name,
                                         std::size_t n) {
  Handle a = open_attr(f, object, name, n);
  Handle type(H5Aget_type(a.get()), H5Tclose);
  const H5T_class_t cls = H5Tget_class(type.get());
  std::vector<std::int64_t> v(n);
  if (cls == H5T_ENUM && H5Tget_size(type.get()) == 1) {  // h5py's numpy bool
    std::vector<std::int8_t> b(n);
    Handle native(H5Tget_native_type(type.get(), H5T_DIR_DEFAULT), H5Tclose);
    DIT_H5_CHECK(H5Aread(a.get(), native.get(), b.data()), f.path(), " ", object, "@", name);
    std::copy(b.begin(), b.end(), v.begin());
    return v;
  }
  DIT_CHECK(cls == H5T_INTEGER, f.path(), ": attribute ", object, "@", name, " must hold integers");
  DIT_H5_CHECK(H5Aread(a.get(), H5T_NATIVE_INT64, v.data()), f.path(), " ", object, "@", name);
  return v;
}

std::int64_t read_attr_int(const File& f, const std::string& object, const std::string& name) {
  return read_attr_ints(f, object, name, 1)[0];
}

std::uint64_t read_attr_u64(const File& f, const std::string& object, const std::string& name) {
  Handle a = open_attr(f, object, name, 1);
  Handle type(H5Aget_type(a.get()), H5Tclose);
  DIT_CHECK(H5Tget_class(type.get()) == H5T_INTEGER, f.path(), ": attribute ", object, "@", name,
            " must be an integer");
  std::uint64_t v = 0;
  DIT_H5_CHECK(H5Aread(a.get(), H5T_NATIVE_UINT64, &v), f.path(), " ", object, "@", name);
  return v;
}

std::vector<double> read_attr_doubles(const File& f, const std::string& object, const std::string& name,
                                      std::size_t n) {
  Handle a = open_attr(f, object, name, n);
  Handle type(H5Aget_type(a.get()), H5Tclose);
  const H5T_class_t cls = H5Tget_class(type.get());
  DIT_CHECK(cls == H5T_FLOAT || cls == H5T_INTEGER, f.path(), ": attribute ", object, "@", name,
            " must hold numbers");
  std::vector<double> v(n);
  DIT_H5_CHECK(H5Aread(a.get(), H5T_NATIVE_DOUBLE, v.data()), f.path(), " ", object, "@", name);
  return v;
}

double read_attr_double(const File& f, const std::string& object, const std::string& name) {
  return read_attr_doubles(f, object, name, 1)[0];
}

// --- writing -----------------------------------------------------------------------------------

Handle creation_plist(hid_t cls, const std::string& where) {
  Handle p(H5Pcreate(cls), H5Pclose);
  DIT_CHECK(bool(p) && H5Pset_obj_track_times(p.get(), false) >= 0, where,
            ": cannot make a creation property list (", error_text(), ")");
  return p;
}

Handle create_group(hid_t parent, const std::string& name, const std::string& where) {
  const Handle gcpl = creation_plist(H5P_GROUP_CREATE, where);
  Handle g(H5Gcreate2(parent, name.c_str(), H5P_DEFAULT, gcpl.get(), H5P_DEFAULT), H5Gclose);
  DIT_CHECK(bool(g), where, ": cannot create group '", name, "' (", error_text(), ")");
  return g;
}

void write_attr_ints(hid_t obj, const std::string& name, const std::vector<std::int64_t>& v, AttrShape shape,
                     const std::string& where) {
  DIT_CHECK(!v.empty() && (shape == AttrShape::List || v.size() == 1), where, ": attribute '", name, "'");
  write_attr(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, v.data(), v.size(), shape, where);
}

void write_attr_u64(hid_t obj, const std::string& name, std::uint64_t v, const std::string& where) {
  write_attr(obj, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, &v, 1, AttrShape::Scalar, where);
}

void write_attr_double(hid_t obj, const std::string& name, double v, const std::string& where) {
  write_attr(obj, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &v, 1, AttrShape::Scalar, where);
}

void write_attr_string(hid_t obj, const std::string& name, const std::string& v, const std::string& where) {
  // Variable-length UTF-8: h5py reads it as str.
  Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.get(), H5T_VARIABLE);
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  const char* p = v.c_str();
  write_attr(obj, name, type.get(), type.get(), &p, 1, AttrShape::Scalar, where);
}

void write_tensor(hid_t group, const std::string& name, const Shape& shape, const float* data,
                  const std::string& where) {
  DIT_CHECK(shape.rank >= 1, where, ": tensor '", name, "' has rank 0");
  hsize_t dims[kMaxDims], chunk[kMaxDims];
  hsize_t row = 1;
  for (int i = 0; i < shape.rank; ++i) {
    DIT_CHECK(shape.dims[i] > 0, where, ": tensor '", name, "' has shape ", shape.str());
    dims[i] = chunk[i] = static_cast<hsize_t>(shape.dims[i]);
    if (i > 0) row *= dims[i];
  }
  chunk[0] = chunk_rows(dims[0], row);
  const Handle dcpl = creation_plist(H5P_DATASET_CREATE, where);
  DIT_H5_CHECK(H5Pset_chunk(dcpl.get(), shape.rank, chunk), where, " ", name);
  DIT_H5_CHECK(H5Pset_fletcher32(dcpl.get()), where, " ", name);
  Handle space(H5Screate_simple(shape.rank, dims, nullptr), H5Sclose);
  Handle d(H5Dcreate2(group, name.c_str(), H5T_IEEE_F32LE, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
           H5Dclose);
  DIT_CHECK(bool(d), where, ": cannot create dataset '", name, "' (", error_text(), ")");
  DIT_CHECK(H5Dwrite(d.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0, where,
            ": cannot write '", name, "' (", error_text(), ")");
}

std::uint64_t tensor_file_bound(const Shape& shape) {
  const std::uint64_t rows = std::uint64_t(shape.dims[0]), row = std::uint64_t(shape.numel()) / rows;
  const std::uint64_t per_chunk = chunk_rows(rows, row), chunks = (rows + per_chunk - 1) / per_chunk;
  // Each chunk whole (the edge one too), its Fletcher32 checksum and an index entry (address, size,
  // filter mask); the dataset: an object header (dataspace, type, layout, filter pipeline, fill
  // value) and its link in the group, well under 4 KiB.
  return chunks * (4 * per_chunk * row + 4 + 32) + 4096;
}

void set_format(hid_t fapl, Format format, const std::string& where) {
  if (format == Format::V18)
    DIT_H5_CHECK(H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_LATEST), where);
  if (format == Format::V110)
    DIT_H5_CHECK(H5Pset_libver_bounds(fapl, H5F_LIBVER_V110, H5F_LIBVER_V110), where);
}

DiskFile DiskFile::create_reserved(const std::string& path, std::uint64_t reserve, const FileOptions& options) {
  // An empty HDF5 file (superblock and root group, a few KB) built in memory is the start of the
  // reserved file; HDF5 then opens it for writing and allocates past its end into the reserve.
  const std::string skeleton = build_in_memory(path, options, [](hid_t) {});
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) DIT_FAIL(path, ": cannot write (", describe_errno(errno), ")");
  int err = ::posix_fallocate(fd, 0, off_t(std::max<std::uint64_t>(reserve, skeleton.size())));
  if (!err && ::pwrite(fd, skeleton.data(), skeleton.size(), 0) != ssize_t(skeleton.size())) err = errno ? errno : EIO;
  if (::close(fd) != 0 && !err) err = errno;
  if (err) {
    ::unlink(path.c_str());
    DIT_FAIL(path, ": cannot write (", describe_errno(err), ")");
  }
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  set_format(fapl.get(), options.format, path);
  Handle f(H5Fopen(path.c_str(), H5F_ACC_RDWR, fapl.get()), H5Fclose);
  DIT_CHECK(bool(f), path, ": cannot open for writing (", error_text(), ")");
  return DiskFile(path, std::move(f));
}

void DiskFile::close() {
  if (!file_) return;
  if (H5Fflush(file_.get(), H5F_SCOPE_LOCAL) < 0) {
    const std::string cause = error_text();
    abandon();
    DIT_FAIL(path_, ": cannot write (", cause, ")");
  }
  if (file_.close() < 0) DIT_FAIL(path_, ": cannot write (", error_text(), ")");
}

void DiskFile::abandon() {
  if (!file_) return;
  const int emptied = ::truncate(path_.c_str(), 0);
  static_cast<void>(emptied);  // when it fails there is nothing to free
  file_.reset();
  H5Eclear2(H5E_DEFAULT);
}

}  // namespace dit::h5
